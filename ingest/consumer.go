package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/inboxd/inboxd/internal/backoff"
)

// Consumer moves Kafka messages into the inbox table. Create it with New and
// start it with Run. Ready, Healthy and LastProgress may be called from any
// goroutine.
type Consumer struct {
	cfg       Config
	writer    inboxWriter
	dialer    *kafka.Dialer
	log       zerolog.Logger
	metrics   *Metrics
	now       func() time.Time
	backoff   func(attempt int) time.Duration
	newReader func(kafka.ReaderConfig) messageReader

	probe brokerProbe

	running   atomic.Bool
	writesOK  atomic.Bool // the last batch write succeeded
	reachable atomic.Bool // the brokers answered the last probe

	mu            sync.Mutex
	reader        messageReader // nil unless Run is running
	fetchingSince time.Time     // when the pending FetchMessage began; zero if none
	lastProgress  time.Time
	backlog       map[topicPartition]int64 // messages known to wait, per partition
}

type topicPartition struct {
	topic     string
	partition int
}

// New validates cfg (after applying defaults) and returns a Consumer writing
// to pool. It does not connect to Kafka: Run does. Metrics are registered with
// reg (nil registers none); log lines carry component=ingest.
func New(cfg Config, pool *pgxpool.Pool, logger zerolog.Logger, reg prometheus.Registerer) (*Consumer, error) {
	if pool == nil {
		return nil, errors.New("ingest: nil database pool")
	}
	return newConsumer(cfg, pgWriter{pool: pool}, logger, reg)
}

func newConsumer(cfg Config, w inboxWriter, logger zerolog.Logger, reg prometheus.Registerer) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dialer, err := newDialer(cfg)
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	metrics, err := NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("ingest: register metrics: %w", err)
	}
	c := &Consumer{
		cfg:     cfg,
		writer:  w,
		dialer:  dialer,
		log:     logger.With().Str("component", "ingest").Logger(),
		metrics: metrics,
		now:     time.Now,
		backlog: make(map[topicPartition]int64),
		probe:   newAdminProbe(cfg, dialer),
		newReader: func(rc kafka.ReaderConfig) messageReader {
			return kafka.NewReader(rc)
		},
	}
	retry := backoff.Exponential{Base: c.cfg.RetryBackoffMin, Max: c.cfg.RetryBackoffMax}
	c.backoff = retry.Delay
	return c, nil
}

// Run consumes until ctx is cancelled and returns nil then; it returns an
// error only if the Kafka reader stops by itself. Before returning it writes
// and commits the batch in hand and closes the reader, both within
// Config.CloseTimeout of the cancellation. Run may not be called again while
// it runs.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("ingest: Run is already running")
	}
	defer func() {
		c.running.Store(false)
		c.updateReady()
	}()

	r := c.newReader(c.readerConfig())
	c.mu.Lock()
	c.reader = r
	clear(c.backlog)
	c.mu.Unlock()
	c.reachable.Store(false) // until the brokers answer
	c.setReady(true)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); c.watchBrokers(watchCtx) }()
	defer func() { stopWatch(); <-watched; c.probe.close() }()
	c.log.Info().
		Strs("brokers", c.cfg.Brokers).Strs("topics", c.cfg.Topics).Str("group", c.cfg.Group).
		Bool("tls", c.cfg.TLS.Enabled).Str("sasl_mechanism", c.cfg.SASL.Mechanism).
		Int("batch_size", c.cfg.BatchSize).Dur("batch_timeout", c.cfg.BatchTimeout).
		Int("max_payload", c.cfg.Mapping.MaxPayload).Dur("session_timeout", c.cfg.SessionTimeout).
		Msg("ingest starting")

	deadline, err := c.loop(ctx, r)

	stopWatch()
	c.setReady(false)
	c.mu.Lock()
	c.reader = nil
	c.fetchingSince = time.Time{}
	c.mu.Unlock()
	c.closeReader(r, deadline)
	c.log.Info().Msg("ingest stopped")
	return err
}

// loop fetches, batches and flushes until ctx is cancelled. It returns the
// deadline by which the reader must be closed: Config.CloseTimeout after the
// cancellation.
func (c *Consumer) loop(ctx context.Context, r messageReader) (time.Time, error) {
	var (
		b           batch
		closing     batchDeadline // closes the batch BatchTimeout after its first message
		fetchErrors int
		runErr      error
	)
	defer closing.stop()

loop:
	for ctx.Err() == nil {
		fetchCtx := ctx
		if len(b.rows) > 0 {
			fetchCtx = closing.ctx
		}
		c.fetchStarted()
		m, err := r.FetchMessage(fetchCtx)
		c.fetchReturned(m, err)

		switch {
		case err == nil:
			fetchErrors = 0
			c.metrics.MessagesFetched.Inc()
			if len(b.rows) == 0 {
				closing.start(ctx, c.cfg.BatchTimeout)
			}
			b.add(m, MapMessage(m, c.cfg.Mapping))
			if len(b.rows) < c.cfg.BatchSize && b.bytes < c.cfg.BatchBytes {
				continue
			}
		case ctx.Err() != nil:
			break loop
		case len(b.rows) > 0 && closing.ctx.Err() != nil:
			// The batch's time is up.
		case errors.Is(err, io.EOF):
			runErr = errors.New("kafka reader closed unexpectedly")
			break loop
		default:
			// kafka-go retries connections itself and reports errors here
			// when joining the group keeps failing (broker unreachable,
			// authentication refused, unknown topic).
			fetchErrors++
			c.metrics.FetchErrors.Inc()
			delay := c.backoff(fetchErrors)
			c.log.Warn().Err(err).Int("attempt", fetchErrors).Dur("retry_in", delay).
				Msg("fetching from Kafka failed; the reader keeps retrying")
			if len(b.rows) > 0 {
				closing.stop()
				if err := c.flush(ctx, r, &b); err != nil {
					break loop
				}
			}
			sleep(ctx, delay)
			continue
		}

		closing.stop()
		if err := c.flush(ctx, r, &b); err != nil {
			break // cancelled while retrying the write
		}
	}

	// Shutting down: write and commit the batch in hand, within the close
	// budget. What cannot be written is not committed, and is delivered
	// again later.
	deadline := time.Now().Add(c.cfg.CloseTimeout)
	if len(b.rows) > 0 {
		fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		err := c.flush(fctx, r, &b)
		cancel()
		if err != nil {
			c.log.Warn().Int("rows", len(b.rows)).
				Msg("batch not written at shutdown; its offsets are not committed and the messages will be delivered again")
		}
	}
	return deadline, runErr
}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool { return backoff.Sleep(ctx, d) }
