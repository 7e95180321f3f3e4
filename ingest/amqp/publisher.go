package amqp

import (
	"github.com/rs/zerolog"

	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/amqppub"
)

// Publisher returns the outbox's publisher to the RabbitMQ server of
// cfg (its URL and TLS alone), for inboxd.OutboxConfig.Publishers.
func Publisher(cfg Config) sourceapi.Publisher {
	return outbox.Opening{Of: outbox.KindAMQP, Open: func(log zerolog.Logger) (outbox.Publisher, error) {
		return amqppub.New(amqppub.Config{URL: cfg.URL, TLS: brokers.TLS(cfg.TLS)}, log)
	}}
}
