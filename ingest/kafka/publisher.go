package kafka

import (
	"github.com/rs/zerolog"

	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/kafkapub"
)

// Publisher returns the outbox's publisher to the Kafka brokers of
// cfg (its connection settings alone: brokers, client id, TLS, SASL; its
// topics are not used), compressing batches with compression (gzip, the
// default, none, snappy, lz4 or zstd), for inboxd.OutboxConfig.Publishers.
func Publisher(cfg Config, compression string) sourceapi.Publisher {
	return outbox.Opening{Of: outbox.KindKafka, Open: func(log zerolog.Logger) (outbox.Publisher, error) {
		return kafkapub.New(kafkapub.Config{Brokers: cfg.Brokers, ClientID: cfg.ClientID, TLS: brokers.TLS(cfg.TLS),
			SASL: brokers.SASL(cfg.SASL), Compression: compression}, log)
	}}
}
