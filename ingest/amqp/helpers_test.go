package amqp

import (
	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/ingesttest"
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

var testLogger = ingesttest.TestLogger

// syncBuffer collects a test logger's lines.
type syncBuffer = ingesttest.SyncBuffer

// remapRejected maps a rejected row again as `inboxd requeue --status
// rejected` does, by the rules of its kind of broker.
func remapRejected(eventID string, m kafka.Message, opts ingest.MapOptions) ingestcore.Row {
	return brokerRemappers(opts).Remap(storedOf(eventID, m))
}
