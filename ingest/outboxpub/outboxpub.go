// Package outboxpub makes the outbox relay's publishers an embedder lists
// in inboxd.OutboxConfig.Publishers, one per broker, from the sources'
// connection settings (ingest/kafka, ingest/amqp, ingest/nats). Importing it links the three brokers' clients
// (franz-go, amqp091-go, nats.go); the root package links none.
package outboxpub

import (
	"io"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/ingest/amqp"
	"github.com/inboxd/inboxd/ingest/kafka"
	"github.com/inboxd/inboxd/ingest/nats"
	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers"
)

// Kafka returns the outbox's publisher to the Kafka brokers of
// cfg (its connection settings alone: brokers, client id, TLS, SASL; its
// topics are not used), compressing batches with compression (gzip, the
// default, none, snappy, lz4 or zstd), for inboxd.OutboxConfig.Publishers.
func Kafka(cfg kafka.Config, compression string) sourceapi.Publisher {
	return kafkaPub{cfg, compression}
}

// AMQP returns the outbox's publisher to the RabbitMQ server of
// cfg (its URL and TLS alone), for inboxd.OutboxConfig.Publishers.
func AMQP(cfg amqp.Config) sourceapi.Publisher { return amqpPub{cfg} }

// NATS returns the outbox's publisher to the NATS JetStream
// server of cfg (its URL, credentials and TLS alone), for
// inboxd.OutboxConfig.Publishers.
func NATS(cfg nats.Config) sourceapi.Publisher { return natsPub{cfg} }

type (
	kafkaPub struct {
		cfg         kafka.Config
		compression string
	}
	amqpPub struct{ cfg amqp.Config }
	natsPub struct{ cfg nats.Config }
)

func (kafkaPub) Kind() string { return outbox.KindKafka }
func (amqpPub) Kind() string  { return outbox.KindAMQP }
func (natsPub) Kind() string  { return outbox.KindNATS }

func (p kafkaPub) OpenPublisher(log zerolog.Logger) (io.Closer, error) {
	k := p.cfg
	return publishers.NewKafka(publishers.KafkaConfig{Brokers: k.Brokers, ClientID: k.ClientID, TLS: brokers.TLS(k.TLS),
		SASL: brokers.SASL(k.SASL), Compression: p.compression}, log)
}

func (p amqpPub) OpenPublisher(log zerolog.Logger) (io.Closer, error) {
	return publishers.NewAMQP(publishers.AMQPConfig{URL: p.cfg.URL, TLS: brokers.TLS(p.cfg.TLS)}, log)
}

func (p natsPub) OpenPublisher(log zerolog.Logger) (io.Closer, error) {
	return publishers.NewNATS(publishers.NATSConfig{URL: p.cfg.URL, CredsFile: p.cfg.CredsFile, TLS: brokers.TLS(p.cfg.TLS)}, log)
}
