package nats

import (
	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/ingesttest"
	"github.com/inboxd/inboxd/internal/ingestcore/natsmap"
	"github.com/inboxd/inboxd/internal/testkit"
	"github.com/segmentio/kafka-go"
)

// The helpers the sources' tests share, by the names the tests use.
var (
	waitFor         = testkit.WaitForReport
	readRows        = ingesttest.ReadRows
	storedOf        = ingesttest.StoredOf
	brokerRemappers = ingesttest.BrokerRemappers
)

// remapRejected maps a rejected row again as `inboxd requeue --status
// rejected` does, by the rules of its kind of broker.
func remapRejected(eventID string, m kafka.Message, opts ingest.MapOptions) ingestcore.Row {
	return brokerRemappers(opts).Remap(storedOf(eventID, m))
}

var testLogger = ingesttest.TestLogger

// syncBuffer collects a test logger's lines.
type syncBuffer = ingesttest.SyncBuffer

// remapNATSRejected maps a rejected row again by the NATS rule (ok false
// when the rule does not own it).
func remapNATSRejected(eventID, source string, key, payload []byte, headers []ingestcore.Header, opts ingest.MapOptions) (ingestcore.Row, bool) {
	s := ingestcore.Stored{Source: source, EventID: eventID, Key: key, Payload: payload, Headers: headers}
	r := natsmap.Rule{Opts: opts}
	if !r.Owns(s) {
		return ingestcore.Row{}, false
	}
	return r.Remap(s), true
}
