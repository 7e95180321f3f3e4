package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
)

// kafkaConsumer moves Kafka messages into the inbox table: the Kafka source of
// the persist-then-ack pipeline. Create it with openKafka (New opens it) and start it with Run.
// Ready, Healthy and LastProgress may be called from any goroutine.
type kafkaConsumer struct {
	*ingestcore.Pipeline

	cfg       Config
	dialer    *kafka.Dialer
	newReader func(kafka.ReaderConfig) messageReader

	probe brokerProbe

	reachable atomic.Bool // the brokers answered the last probe

	mu            sync.Mutex
	reader        messageReader            // nil unless Run is running
	fetchingSince time.Time                // when the pending FetchMessage began; zero if none
	backlog       map[topicPartition]int64 // messages known to wait, per partition
	pending       map[topicPartition]int64 // highest offset fetched per partition since the last seal
}

type topicPartition struct {
	topic     string
	partition int
}

// openKafka validates cfg (after applying defaults) and returns a kafkaConsumer writing
// to pool. It does not connect to Kafka: Run does. Metrics are registered with
// reg (nil registers none); log lines carry component=ingest.
func openKafka(cfg Config, pool *pgxpool.Pool, logger zerolog.Logger, reg prometheus.Registerer) (*kafkaConsumer, error) {
	w, err := ingestcore.WriterOn(pool, cfg.handOff)
	if err != nil {
		return nil, err
	}
	return newConsumer(cfg, w, logger, reg)
}

func newConsumer(cfg Config, w ingestcore.InboxWriter, logger zerolog.Logger, reg prometheus.Registerer) (*kafkaConsumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dialer, err := newDialer(cfg)
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	c := &kafkaConsumer{
		cfg:     cfg,
		dialer:  dialer,
		backlog: make(map[topicPartition]int64),
		pending: make(map[topicPartition]int64),
		probe:   newAdminProbe(cfg, dialer),
		newReader: func(rc kafka.ReaderConfig) messageReader {
			return kafka.NewReader(rc)
		},
	}
	c.Pipeline, err = ingestcore.NewPipeline(ingest.SourceKafka, cfg.PipelineConfig, w, logger, reg, c.reachable.Load)
	if err != nil {
		return nil, fmt.Errorf("ingest: register metrics: %w", err)
	}
	return c, nil
}

// Run consumes until ctx is cancelled and returns nil then; it returns an
// error only if the Kafka reader stops by itself. Before returning it writes
// and commits the batch in hand and closes the reader, both within
// Config.CloseTimeout of the cancellation. Run may not be called again while
// it runs.
func (c *kafkaConsumer) Run(ctx context.Context) error {
	if !c.Running.CompareAndSwap(false, true) {
		return errors.New("ingest: Run is already running")
	}
	defer func() {
		c.Running.Store(false)
		c.UpdateReady()
	}()

	r := c.newReader(c.readerConfig())
	c.mu.Lock()
	c.reader = r
	clear(c.backlog)
	clear(c.pending)
	c.mu.Unlock()
	c.reachable.Store(false) // until the brokers answer
	c.SetReady(true)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); c.watchBrokers(watchCtx) }()
	defer func() { stopWatch(); <-watched; c.probe.close() }()
	c.Log.Info().
		Strs("brokers", c.cfg.Brokers).Strs("topics", c.cfg.Topics).Str("group", c.cfg.Group).
		Bool("tls", c.cfg.TLS.Enabled).Str("sasl_mechanism", c.cfg.SASL.Mechanism).
		Int("batch_size", c.cfg.BatchSize).Dur("batch_timeout", c.cfg.BatchTimeout).
		Int("max_payload", c.cfg.Mapping.MaxPayload).Int("max_headers", c.cfg.Mapping.MaxHeaders).
		Dur("session_timeout", c.cfg.SessionTimeout).
		Msg("ingest starting")

	deadline, err := c.Loop(ctx, kafkaSource{c: c, r: r})

	stopWatch()
	c.SetReady(false)
	c.mu.Lock()
	c.reader = nil
	c.fetchingSince = time.Time{}
	c.mu.Unlock()
	c.closeReader(r, deadline)
	c.Log.Info().Msg("ingest stopped")
	return err
}

// kafkaSource is the Consumer as the pipeline's source: it fetches with
// FetchMessage, maps with MapMessage and acknowledges a batch by
// committing the highest offset it holds of each partition.
type kafkaSource struct {
	c *kafkaConsumer
	r messageReader
}

func (s kafkaSource) Fetch(ctx context.Context) (ingestcore.Row, error) {
	s.c.fetchStarted()
	m, err := s.r.FetchMessage(ctx)
	s.c.fetchReturned(m, err)
	if err != nil {
		if errors.Is(err, io.EOF) && ctx.Err() == nil {
			return ingestcore.Row{}, ingestcore.FatalError{Err: errors.New("kafka reader closed unexpectedly")}
		}
		return ingestcore.Row{}, err
	}
	return kafkamap.MapMessage(m, s.c.cfg.Mapping), nil
}

// seal returns the commit of one message per partition, carrying the
// highest offset fetched since the previous seal: committing it covers
// every lower offset of the partition.
func (s kafkaSource) Seal() ingestcore.AckFunc {
	s.c.mu.Lock()
	msgs := make([]kafka.Message, 0, len(s.c.pending))
	for tp, off := range s.c.pending {
		msgs = append(msgs, kafka.Message{Topic: tp.topic, Partition: tp.partition, Offset: off})
	}
	clear(s.c.pending)
	s.c.mu.Unlock()
	return func(ctx context.Context) error { return s.r.CommitMessages(ctx, msgs...) }
}

func (kafkaSource) FetchFailed() string {
	// kafka-go retries connections itself and reports errors here when
	// joining the group keeps failing (broker unreachable, authentication
	// refused, unknown topic).
	return "fetching from Kafka failed; the reader keeps retrying"
}
