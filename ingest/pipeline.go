package ingest

import (
	"time"
)

// Source kinds: the bounded values of the source_kind label of the ingest
// metrics and of the readiness report.
const (
	// SourceKafka is a Kafka consumer group (ingest/kafka).
	SourceKafka = "kafka"
	// SourceAMQP is a set of RabbitMQ queues (ingest/amqp).
	SourceAMQP = "amqp"
	// SourceNATS is a set of NATS JetStream streams (ingest/nats).
	SourceNATS = "nats"
	// SourceWebhook is a set of webhook sources on one listener
	// (ingest/webhook).
	SourceWebhook = "webhook"
)

// PipelineConfig is what the persist-then-ack pipeline, shared by every
// source, needs: batching, the mapping, the write retries and the shutdown
// budget. Zero fields take the defaults of this package (Default*).
type PipelineConfig struct {
	// BatchSize closes a batch when it holds this many messages.
	BatchSize int
	// BatchTimeout closes a non-empty batch this long after its first message.
	BatchTimeout time.Duration
	// Linger closes a non-empty batch once no message has come for this
	// long while the writer is idle.
	Linger time.Duration
	// BatchBytes closes a batch when its rows' payloads, keys and headers
	// add up to this many bytes.
	BatchBytes int
	// Mapping controls how messages become rows.
	Mapping MapOptions
	// RetryBackoffMin is the first delay before retrying a failed write.
	RetryBackoffMin time.Duration
	// RetryBackoffMax caps the delay between retries of a failed write or
	// fetch.
	RetryBackoffMax time.Duration
	// WriteTimeout bounds one attempt at writing a batch.
	WriteTimeout time.Duration
	// AckTimeout bounds one acknowledgement of a batch (Kafka: its offset
	// commit).
	AckTimeout time.Duration
	// CloseTimeout bounds, at shutdown, the final flush and the closing of
	// the source together.
	CloseTimeout time.Duration
}
