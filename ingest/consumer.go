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
		Int("max_payload", c.cfg.Mapping.MaxPayload).Int("max_headers", c.cfg.Mapping.MaxHeaders).
		Dur("session_timeout", c.cfg.SessionTimeout).
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
//
// Writes run on a goroutine of their own (a writer), one batch at a time and
// in fetch order, each batch's offsets committed right after its rows, while
// the next batch fills: reading and mapping overlap the database's work.
// A batch is handed to the writer when it is full, when BatchTimeout has
// passed since its first message, or, while the writer is idle, as soon as
// no message has come for Config.Linger: at low rates rows reach the inbox
// within a millisecond or two, at high rates batches grow while the writer
// works. At most two batches are in hand: one written, one filling.
func (c *Consumer) loop(ctx context.Context, r messageReader) (time.Time, error) {
	var (
		closing     batchDeadline // ends when the filling batch must go
		fetchErrors int
		runErr      error
	)
	defer closing.stop()
	// Writes outlive ctx by the close budget: the batch in hand at shutdown
	// is still written and committed within it.
	wctx, stopWrites := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWrites()
	var (
		closeOnce sync.Once
		deadline  time.Time
	)
	beginClose := func() time.Time {
		closeOnce.Do(func() {
			deadline = time.Now().Add(c.cfg.CloseTimeout)
			time.AfterFunc(c.cfg.CloseTimeout, stopWrites)
		})
		return deadline
	}
	stopWatch := context.AfterFunc(ctx, func() { beginClose() })
	defer stopWatch()
	w := newBatchWriter(c, r, &closing)
	go w.run(wctx)
	b := w.next()

loop:
	for ctx.Err() == nil {
		fetchCtx := ctx
		if len(b.rows) > 0 {
			fetchCtx = closing.context()
		}
		c.fetchStarted()
		m, err := r.FetchMessage(fetchCtx)
		c.fetchReturned(m, err)

		switch {
		case err == nil:
			fetchErrors = 0
			c.metrics.MessagesFetched.Inc()
			if len(b.rows) == 0 {
				closing.start(ctx, c.lingerFor(w))
			}
			b.add(m, MapMessage(m, c.cfg.Mapping))
			if len(b.rows) < c.cfg.BatchSize && b.bytes < c.cfg.BatchBytes {
				continue
			}
		case ctx.Err() != nil:
			break loop
		case len(b.rows) > 0 && closing.expired():
			// The batch's time is up, or the writer is free for it.
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
				w.write(b)
				b = w.next()
			}
			sleep(ctx, delay)
			continue
		}

		closing.stop()
		w.write(b)
		b = w.next()
	}

	// Shutting down: write and commit the batch in hand, within the close
	// budget. What cannot be written is not committed, and is delivered
	// again later.
	dl := beginClose()
	if len(b.rows) > 0 {
		w.write(b)
	}
	w.close()
	return dl, runErr
}

// lingerFor is how long the batch just started may wait: Config.Linger
// while the writer is idle, else BatchTimeout (the writer's end cuts it
// short).
func (c *Consumer) lingerFor(w *batchWriter) time.Duration {
	if w.idle() {
		return min(c.cfg.Linger, c.cfg.BatchTimeout)
	}
	return c.cfg.BatchTimeout
}

// batchWriter writes batches in order on its own goroutine. Two batches
// circulate between the loop (filling) and the writer (writing).
type batchWriter struct {
	c       *Consumer
	r       messageReader
	closing *batchDeadline
	full    chan *batch   // to the writer
	free    chan *batch   // back to the loop, written
	pending atomic.Int32  // batches handed over and not yet written
	done    chan struct{} // closed when run returns
}

func newBatchWriter(c *Consumer, r messageReader, closing *batchDeadline) *batchWriter {
	w := &batchWriter{c: c, r: r, closing: closing, full: make(chan *batch, 1), free: make(chan *batch, 2),
		done: make(chan struct{})}
	w.free <- &batch{}
	w.free <- &batch{}
	return w
}

// next returns an empty batch to fill, waiting while both are in the
// writer's hands.
func (w *batchWriter) next() *batch { return <-w.free }

// write hands b to the writer; it waits while the writer still has the
// batch before it queued.
func (w *batchWriter) write(b *batch) {
	w.pending.Add(1)
	w.full <- b
}

// idle reports whether the writer has nothing to write.
func (w *batchWriter) idle() bool { return w.pending.Load() == 0 }

// close waits until every batch handed over is written, or given up at
// the close deadline.
func (w *batchWriter) close() {
	close(w.full)
	<-w.done
}

func (w *batchWriter) run(ctx context.Context) {
	defer close(w.done)
	for b := range w.full {
		if ctx.Err() == nil {
			if err := w.c.flush(ctx, w.r, b); err != nil {
				w.c.log.Warn().Int("rows", len(b.rows)).
					Msg("batch not written at shutdown; its offsets are not committed and the messages will be delivered again")
			}
		} else {
			w.c.log.Warn().Int("rows", len(b.rows)).
				Msg("batch not written at shutdown; its offsets are not committed and the messages will be delivered again")
		}
		b.reset()
		if w.pending.Add(-1) == 0 {
			// The filling batch need not wait for its timeout any more.
			w.closing.expire()
		}
		w.free <- b
	}
}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool { return backoff.Sleep(ctx, d) }
