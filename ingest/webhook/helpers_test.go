package webhook

import (
	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/ingesttest"
	"github.com/segmentio/kafka-go"
)

// The helpers the sources' tests share, by the names the tests use.
var (
	storedOf        = ingesttest.StoredOf
	brokerRemappers = ingesttest.BrokerRemappers
)

// remapRejectedRow maps a rejected row again as `inboxd requeue --status
// rejected` does, by the rules of its kind of source, the webhook sources
// being srcs (nil: no sources file).
func remapRejectedRow(eventID string, m kafka.Message, opts ingest.MapOptions, srcs []SourceConfig) ingestcore.Row {
	rs := brokerRemappers(opts)
	rs[ingest.SourceWebhook] = remapRule{sources: srcs, opts: opts}
	return rs.Remap(storedOf(eventID, m))
}

// remapRejected is remapRejectedRow without a sources file.
func remapRejected(eventID string, m kafka.Message, opts ingest.MapOptions) ingestcore.Row {
	return remapRejectedRow(eventID, m, opts, nil)
}
