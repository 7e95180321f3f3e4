// Package kafkapub is the outbox relay's publisher to Kafka (franz-go's
// idempotent producer): Config, New, Publisher. ingest/kafka's Publisher
// makes it for an embedder; it links franz-go and no other broker client.
package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/outbox"
)

// DefaultMaxMessageBytes is Config.MaxMessageBytes when it is
// zero: 1 MiB, under Kafka's default max.message.bytes (1048588).
const DefaultMaxMessageBytes = 1 << 20

const (
	// kafkaLinger is how long a partition's batch waits for more records:
	// the relay hands over a whole batch at once, so little is gained by
	// waiting longer, and the commit → acknowledgement latency counts.
	kafkaLinger = time.Millisecond
	// kafkaUnknownTopicRetries bounds the metadata look-ups of a topic that
	// does not exist before its records fail (kerr.UnknownTopicOrPartition):
	// a missing topic fails fast, and the relay holds the destination back.
	kafkaUnknownTopicRetries = 2
	// kafkaRecordOverhead bounds what Kafka counts against max.message.bytes
	// beside a record's key, value and header bytes when it is alone in its
	// batch: the v2 batch header (61 bytes) and the record's varints.
	kafkaRecordOverhead = 61 + 36
	// kafkaHeaderOverhead bounds the varints of one header.
	kafkaHeaderOverhead = 10
)

// Config configures a Publisher: the brokers and the security
// settings of the Kafka source (INBOXD_KAFKA_*).
type Config struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// ClientID identifies the producer to the brokers; empty is
	// brokers.DefaultClientID.
	ClientID string
	// TLS configures TLS to the brokers, as for the source.
	TLS brokers.TLS
	// SASL configures SASL authentication, as for the source.
	SASL brokers.SASL
	// MaxMessageBytes is the largest batch sent to a partition, and so the
	// largest message (key, payload and headers with the batch's overhead);
	// a larger one is refused. It must not exceed the topics'
	// max.message.bytes: the broker refuses a whole batch over it, so with
	// a lower topic limit the records batched with a message too large for
	// it are refused with it. Zero is DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Compression is the codec of the batches produced, one of
	// KafkaCompressions; empty is DefaultKafkaCompression. A batch goes
	// out compressed only when that makes it smaller.
	Compression string
}

// kafkaCodec is the franz-go codec of a KafkaCompressions name.
func kafkaCodec(name string) (kgo.CompressionCodec, bool) {
	switch name {
	case "none":
		return kgo.NoCompression(), true
	case "gzip":
		return kgo.GzipCompression(), true
	case "snappy":
		return kgo.SnappyCompression(), true
	case "lz4":
		return kgo.Lz4Compression(), true
	case "zstd":
		return kgo.ZstdCompression(), true
	}
	return kgo.CompressionCodec{}, false
}

// Publisher publishes to Kafka with franz-go's idempotent producer:
// acks=all, so a record is acknowledged once every in-sync replica has it,
// and the producer's sequence numbers, so a retry inside the client never
// writes a record twice nor reorders a partition. (segmentio/kafka-go, the
// source's client, has no idempotent producer.) Records with a key go to
// the key's partition by Kafka's murmur2 hash, as the Java client places
// them; records without one to any partition. Topics are never created.
// Its methods may be called from any goroutine.
type Publisher struct {
	cl        *kgo.Client
	max       int
	log       zerolog.Logger
	reachable atomic.Bool
	closeOnce sync.Once
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher for cfg's brokers. It does not connect:
// the first Publish does.
func New(cfg Config, log zerolog.Logger) (*Publisher, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("outbox: no Kafka brokers (INBOXD_KAFKA_BROKERS)")
	}
	if cfg.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("outbox: Kafka max message bytes must not be negative, got %d", cfg.MaxMessageBytes)
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.ClientID == "" {
		cfg.ClientID = brokers.DefaultClientID
	}
	if cfg.Compression == "" {
		cfg.Compression = outbox.DefaultKafkaCompression
	}
	codec, ok := kafkaCodec(cfg.Compression)
	if !ok {
		return nil, fmt.Errorf("outbox: Kafka compression must be one of %s, got %q", strings.Join(outbox.KafkaCompressions, ", "), cfg.Compression)
	}
	p := &Publisher{max: cfg.MaxMessageBytes,
		log: log.With().Str("component", "outbox").Str("broker", outbox.KindKafka).Logger()}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		// acks=all; idempotence is on (franz-go's default, kept by not
		// passing DisableIdempotentWrite) and needs it.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(kafkaLinger),
		kgo.UnknownTopicRetries(kafkaUnknownTopicRetries),
		kgo.ProducerBatchMaxBytes(int32(min(cfg.MaxMessageBytes, 1<<30))),
		// franz-go's default is snappy, which kafkajs cannot read.
		kgo.ProducerBatchCompression(codec),
		kgo.WithHooks(kafkaHooks{p}),
	}
	if cfg.TLS.Enabled {
		tc, err := cfg.TLS.Build("INBOXD_KAFKA_TLS")
		if err != nil {
			return nil, fmt.Errorf("outbox: %w", err)
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch s := cfg.SASL; s.Mechanism {
	case "":
	case brokers.SASLPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
	case brokers.SASLScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
	case brokers.SASLScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("outbox: INBOXD_KAFKA_SASL_MECHANISM: must be %s, got %q", brokers.SASLMechanismsText, s.Mechanism)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("outbox: Kafka client: %w", err)
	}
	p.cl = cl
	p.log.Info().Strs("brokers", cfg.Brokers).Str("sasl", cfg.SASL.String()).Bool("tls", cfg.TLS.Enabled).
		Int("max_message_bytes", cfg.MaxMessageBytes).Str("compression", cfg.Compression).
		Msg("Kafka publisher configured (acks=all, idempotent)")
	return p, nil
}

// Check refuses a message whose key, payload and headers, with a batch's
// overhead, exceed MaxMessageBytes.
func (p *Publisher) Check(m outbox.Message) error {
	if n := kafkaSize(m); n > p.max {
		return outbox.Refused("kafka: message of %d bytes (key, payload, headers and batch overhead) exceeds the limit of %d bytes", n, p.max)
	}
	return nil
}

// PipelinesKeys is true: a key's records go to one partition, and when the
// broker refuses a batch of it the idempotent producer fails every record
// buffered behind it there, and the broker takes no later batch out of
// sequence (TestKafkaFailedRecordFailsTheRestOfItsKey).
func (p *Publisher) PipelinesKeys() bool { return true }

// kafkaSize bounds what the broker counts of m alone in its batch.
func kafkaSize(m outbox.Message) int {
	n := kafkaRecordOverhead + len(m.Key) + len(m.Payload)
	for _, h := range m.Headers {
		n += kafkaHeaderOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// Publish produces msgs in their order and waits for each one's
// acknowledgement by every in-sync replica. The records of one key go to
// one partition, in order, and the idempotent producer keeps that order
// through its retries; if one fails, franz-go fails the records buffered
// behind it in its partition too, so no later record of the key is written
// before it.
//
// When ctx ends, Publish returns at once, the records not acknowledged
// failing with ctx's error. The records franz-go has not yet written to a
// broker are dropped by it then (it checks the context before writing a
// batch) and are never sent. A produce request already written is not
// cancelled: the idempotent producer cannot tell whether the broker stored
// it, so it waits for the answer (at most the 10s produce timeout plus the
// request overhead, retried on a broken connection) and its records may be
// stored after Publish returned, each carrying its event_id: the duplicate
// the relay's at-least-once bound already counts (the relay republishes
// the batch), never a reordering, since everything produced later to that
// partition queues behind them.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(msgs)) // promises may run after Publish returned
	pending := 0
	for i, m := range msgs {
		if m.Destination.Kind != outbox.KindKafka {
			errs[i] = fmt.Errorf("kafka: destination %s is not a Kafka topic", m.Destination)
			continue
		}
		rec := &kgo.Record{Topic: m.Destination.Name, Value: m.Payload, Headers: make([]kgo.RecordHeader, len(m.Headers))}
		if m.Key != "" {
			rec.Key = []byte(m.Key)
		}
		if rec.Value == nil {
			rec.Value = []byte{} // a nil value is a tombstone
		}
		for j, h := range m.Headers {
			rec.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)}
		}
		pending++
		p.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { results <- result{i, err} })
	}
	acked := make([]bool, len(msgs))
	for ; pending > 0; pending-- {
		select {
		case r := <-results:
			acked[r.i] = true
			errs[r.i] = p.classify(msgs[r.i], r.err)
		case <-ctx.Done():
			n := 0
			for i, m := range msgs {
				if !acked[i] && errs[i] == nil && m.Destination.Kind == outbox.KindKafka {
					errs[i] = fmt.Errorf("kafka: topic %s: not acknowledged: %w", m.Destination.Name, ctx.Err())
					n++
				}
			}
			p.log.Warn().Int("unacknowledged", n).Msg("Kafka did not acknowledge every message in time")
			return errs
		}
	}
	return errs
}

// classify turns a record's produce error into Publish's: a broker's
// verdict on the record itself (too large, invalid) is a refusal; anything
// else (a missing topic, an unreachable broker, authorization) is not.
func (p *Publisher) classify(m outbox.Message, err error) error {
	switch {
	case err == nil:
		p.reachable.Store(true)
		return nil
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge), errors.Is(err, kerr.InvalidRecord):
		p.reachable.Store(true)
		return outbox.Refused("kafka: topic %s: %v", m.Destination.Name, err)
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return fmt.Errorf("kafka: topic %s does not exist (topics are not created): %w", m.Destination.Name, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("kafka: topic %s: not acknowledged: %w", m.Destination.Name, err)
	default:
		p.reachable.Store(false)
		return fmt.Errorf("kafka: topic %s: %w", m.Destination.Name, err)
	}
}

// Ready reports whether the brokers were reachable at the last contact: a
// connection opened, or a produce answered. It is false before the first
// Publish.
func (p *Publisher) Ready() bool { return p.reachable.Load() }

// Close closes the client; records still buffered fail. It may be called
// more than once.
func (p *Publisher) Close() error {
	p.closeOnce.Do(p.cl.Close)
	return nil
}

// kafkaHooks follows the connections for Ready.
type kafkaHooks struct{ p *Publisher }

var _ kgo.HookBrokerConnect = kafkaHooks{}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (h kafkaHooks) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		if h.p.reachable.Swap(false) {
			h.p.log.Warn().Err(err).Str("addr", fmt.Sprintf("%s:%d", meta.Host, meta.Port)).Msg("cannot connect to a Kafka broker")
		}
		return
	}
	h.p.reachable.Store(true)
}
