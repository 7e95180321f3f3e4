package nats

import (
	"github.com/rs/zerolog"

	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/natspub"
)

// Publisher returns the outbox's publisher to the NATS JetStream
// server of cfg (its URL, credentials and TLS alone), for
// inboxd.OutboxConfig.Publishers.
func Publisher(cfg Config) sourceapi.Publisher {
	return outbox.Opening{Of: outbox.KindNATS, Open: func(log zerolog.Logger) (outbox.Publisher, error) {
		return natspub.New(natspub.Config{URL: cfg.URL, CredsFile: cfg.CredsFile, TLS: brokers.TLS(cfg.TLS)}, log)
	}}
}
