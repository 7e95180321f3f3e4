package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
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

	running atomic.Bool
	ready   atomic.Bool

	mu            sync.Mutex
	reader        messageReader // nil unless Run is running
	fetchingSince time.Time     // when the pending FetchMessage began; zero if none
	lastProgress  time.Time
	backlog       map[topicPartition]int64 // messages known to wait, per partition
}

// messageReader is the part of *kafka.Reader that the consumer uses.
type messageReader interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	CommitMessages(ctx context.Context, msgs ...kafka.Message) error
	Stats() kafka.ReaderStats
	Close() error
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
		newReader: func(rc kafka.ReaderConfig) messageReader {
			return kafka.NewReader(rc)
		},
	}
	c.backoff = func(attempt int) time.Duration {
		return expBackoff(attempt, c.cfg.RetryBackoffMin, c.cfg.RetryBackoffMax)
	}
	return c, nil
}

// Ready reports whether ingest is running and its last attempt at writing a
// batch did not fail. It is false before Run, after Run returns, and while the
// database refuses or fails batch writes.
func (c *Consumer) Ready() bool { return c.ready.Load() }

// LastProgress returns when a message was last fetched or a batch last
// written; zero before the first.
func (c *Consumer) LastProgress() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastProgress
}

// Healthy returns an error when the consumer looks stuck: the current
// FetchMessage call has waited longer than Config.StallTimeout although
// messages are known to be waiting on a partition it reads (from the
// high-water mark of the last message fetched from that partition). The
// backlog is forgotten at each rebalance. Healthy returns nil when Run is not
// running. It is meant for a liveness probe; see the package documentation for
// what it cannot detect.
func (c *Consumer) Healthy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reader == nil {
		return nil
	}
	// Only the consumer calls Stats, so its counters (reset by each call)
	// count the rebalances since the previous call.
	if c.reader.Stats().Rebalances > 0 {
		clear(c.backlog)
	}
	if c.fetchingSince.IsZero() {
		return nil
	}
	waited := c.now().Sub(c.fetchingSince)
	if waited < c.cfg.StallTimeout {
		return nil
	}
	var worst topicPartition
	var behind int64
	for tp, lag := range c.backlog {
		if lag > behind {
			worst, behind = tp, lag
		}
	}
	if behind == 0 {
		return nil
	}
	return fmt.Errorf("stalled: no message fetched for %s although %d messages wait on topic %s partition %d",
		waited.Round(time.Second), behind, worst.topic, worst.partition)
}

// Run consumes until ctx is cancelled and returns nil then; it returns an
// error only if the Kafka reader stops by itself. Before returning it writes
// and commits the batch in hand (within Config.CloseTimeout) and closes the
// reader (waiting at most Config.CloseTimeout). Run may not be called again
// while it runs.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("ingest: Run is already running")
	}
	defer c.running.Store(false)

	r := c.newReader(c.readerConfig())
	c.mu.Lock()
	c.reader = r
	clear(c.backlog)
	c.mu.Unlock()
	c.setReady(true)
	c.log.Info().
		Strs("brokers", c.cfg.Brokers).Strs("topics", c.cfg.Topics).Str("group", c.cfg.Group).
		Bool("tls", c.cfg.TLS.Enabled).Str("sasl_mechanism", c.cfg.SASL.Mechanism).
		Int("batch_size", c.cfg.BatchSize).Dur("batch_timeout", c.cfg.BatchTimeout).
		Int("max_payload", c.cfg.Mapping.MaxPayload).Dur("session_timeout", c.cfg.SessionTimeout).
		Msg("ingest starting")

	err := c.loop(ctx, r)

	c.setReady(false)
	c.mu.Lock()
	c.reader = nil
	c.fetchingSince = time.Time{}
	c.mu.Unlock()
	c.closeReader(r)
	c.log.Info().Msg("ingest stopped")
	return err
}

func (c *Consumer) readerConfig() kafka.ReaderConfig {
	start := kafka.FirstOffset
	if c.cfg.StartFromLatest {
		start = kafka.LastOffset
	}
	debug := c.log.With().Str("source", "kafka-go").Logger()
	return kafka.ReaderConfig{
		Brokers:     c.cfg.Brokers,
		GroupID:     c.cfg.Group,
		GroupTopics: c.cfg.Topics,
		Dialer:      c.dialer,
		// Room for a whole batch while the previous one is being written.
		QueueCapacity: c.cfg.BatchSize,
		// A message of MaxPayload bytes must fit in one fetch: smaller would
		// make the broker truncate it (or, with old fetch versions, stall the
		// partition on it).
		MaxBytes: c.cfg.Mapping.MaxPayload + readerHeadroom,
		// A partition reader waits this long in a fetch with nothing to read;
		// rebalances and Close wait for it, so keep it short.
		MaxWait:           time.Second,
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		SessionTimeout:    c.cfg.SessionTimeout,
		RebalanceTimeout:  c.cfg.RebalanceTimeout,
		JoinGroupBackoff:  c.cfg.RetryBackoffMax,
		// Synchronous commits: CommitMessages returns once the broker has
		// the offsets. An interval would commit later, and drop offsets on a
		// rebalance.
		CommitInterval:  0,
		StartOffset:     start,
		ReadLagInterval: -1, // not available with groups; would only start a goroutine
		Logger: kafka.LoggerFunc(func(format string, args ...any) {
			debug.Debug().Msg(strings.TrimSpace(fmt.Sprintf(format, args...)))
		}),
		ErrorLogger: kafka.LoggerFunc(func(format string, args ...any) {
			debug.Warn().Msg(strings.TrimSpace(fmt.Sprintf(format, args...)))
		}),
	}
}

// closeReader closes r, waiting at most CloseTimeout: a kafka-go reader's
// Close blocks while a group join is pending. Offsets are committed per batch,
// so abandoning the close loses nothing; the goroutine finishes on its own.
func (c *Consumer) closeReader(r messageReader) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Close(); err != nil {
			c.log.Warn().Err(err).Msg("closing kafka reader failed")
		}
	}()
	t := time.NewTimer(c.cfg.CloseTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.log.Warn().Dur("close_timeout", c.cfg.CloseTimeout).
			Msg("kafka reader did not close in time (a group join is probably pending); leaving it behind, offsets are already committed")
	}
}

// batch is the messages fetched and not yet written.
type batch struct {
	rows  []Row
	bytes int
	last  map[topicPartition]int64 // highest offset per partition
}

func (b *batch) add(m kafka.Message, r Row) {
	b.rows = append(b.rows, r)
	b.bytes += len(r.Payload) + len(r.Key)
	if b.last == nil {
		b.last = make(map[topicPartition]int64)
	}
	tp := topicPartition{m.Topic, m.Partition}
	if off, ok := b.last[tp]; !ok || m.Offset > off {
		b.last[tp] = m.Offset
	}
}

// commits returns one message per partition, carrying the highest offset:
// committing it covers every lower offset of the partition.
func (b *batch) commits() []kafka.Message {
	msgs := make([]kafka.Message, 0, len(b.last))
	for tp, off := range b.last {
		msgs = append(msgs, kafka.Message{Topic: tp.topic, Partition: tp.partition, Offset: off})
	}
	return msgs
}

func (b *batch) reset() {
	clear(b.rows) // drop references to payloads
	b.rows = b.rows[:0]
	b.bytes = 0
	clear(b.last)
}

// loop fetches, batches and flushes until ctx is cancelled.
func (c *Consumer) loop(ctx context.Context, r messageReader) error {
	var (
		b           batch
		deadline    batchDeadline // closes the batch BatchTimeout after its first message
		fetchErrors int
		runErr      error
	)
	defer deadline.stop()

loop:
	for ctx.Err() == nil {
		fetchCtx := ctx
		if len(b.rows) > 0 {
			fetchCtx = deadline.ctx
		}
		c.fetchStarted()
		m, err := r.FetchMessage(fetchCtx)
		c.fetchReturned(m, err)

		switch {
		case err == nil:
			fetchErrors = 0
			c.metrics.MessagesFetched.Inc()
			if len(b.rows) == 0 {
				deadline.start(ctx, c.cfg.BatchTimeout)
			}
			b.add(m, MapMessage(m, c.cfg.Mapping))
			if len(b.rows) < c.cfg.BatchSize && b.bytes < c.cfg.BatchBytes {
				continue
			}
		case ctx.Err() != nil:
			break loop
		case len(b.rows) > 0 && deadline.ctx.Err() != nil:
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
				deadline.stop()
				if err := c.flush(ctx, r, &b); err != nil {
					break loop
				}
			}
			sleep(ctx, delay)
			continue
		}

		deadline.stop()
		if err := c.flush(ctx, r, &b); err != nil {
			break // cancelled while retrying the write
		}
	}

	// Shutting down: write and commit the batch in hand, within bounds. What
	// cannot be written is not committed, and is delivered again later.
	if len(b.rows) > 0 {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.CloseTimeout)
		err := c.flush(fctx, r, &b)
		cancel()
		if err != nil {
			c.log.Warn().Int("rows", len(b.rows)).
				Msg("batch not written at shutdown; its offsets are not committed and the messages will be delivered again")
		}
	}
	return runErr
}

// batchDeadline is a context that ends when the current batch must be
// written.
type batchDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func (d *batchDeadline) start(parent context.Context, after time.Duration) {
	d.stop()
	d.ctx, d.cancel = context.WithTimeout(parent, after)
}

func (d *batchDeadline) stop() {
	if d.cancel != nil {
		d.cancel()
	}
}

// flush writes b (retrying the same rows until it succeeds or ctx ends), then
// commits its offsets and empties it. It returns an error only when ctx ended
// before the rows were written; then nothing is committed and b is kept.
func (c *Consumer) flush(ctx context.Context, r messageReader, b *batch) error {
	inserted, err := c.write(ctx, b.rows)
	if err != nil {
		return err
	}
	c.metrics.RowsInserted.Add(float64(inserted))
	c.metrics.Duplicates.Add(float64(len(b.rows) - inserted))
	c.metrics.BatchRows.Observe(float64(len(b.rows)))
	rejected := 0
	for _, row := range b.rows {
		if row.Reason != "" {
			rejected++
			c.metrics.Rejected.WithLabelValues(string(row.Reason)).Inc()
			c.log.Warn().Str("event_id", row.EventID).Str("event_type", row.EventType).
				Str("reason", string(row.Reason)).Str("last_error", row.LastError).
				Msg("message stored as rejected")
		}
	}
	c.log.Debug().Int("rows", len(b.rows)).Int("inserted", inserted).
		Int("duplicates", len(b.rows)-inserted).Int("rejected", rejected).Msg("batch written")

	// The rows are committed in the database: now, and only now, the offsets.
	// The commit is not cut short by ctx's cancellation (the rows are safe,
	// and committing them spares a redelivery) but keeps ctx's deadline, the
	// shutdown budget, when it has one.
	timeout := c.cfg.CommitTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	err = r.CommitMessages(cctx, b.commits()...)
	cancel()
	if err != nil {
		c.metrics.OffsetCommitErrors.Inc()
		c.log.Warn().Err(err).Int("rows", len(b.rows)).
			Msg("committing offsets failed after the batch was written; the messages may be delivered again and will be deduplicated")
	}
	c.mu.Lock()
	c.lastProgress = c.now()
	c.mu.Unlock()
	b.reset()
	return nil
}

// write writes rows, retrying the same rows with capped exponential backoff
// until it succeeds or ctx ends. Ready is false from the first failure until
// a write succeeds.
func (c *Consumer) write(ctx context.Context, rows []Row) (int, error) {
	for attempt := 1; ; attempt++ {
		start := time.Now()
		inserted, err := c.writeOnce(ctx, rows)
		if err == nil {
			c.metrics.BatchWriteDuration.Observe(time.Since(start).Seconds())
			if attempt > 1 {
				c.log.Info().Int("rows", len(rows)).Int("attempts", attempt).Msg("batch written after retries; ingest resumed")
			}
			c.setReady(true)
			return inserted, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		c.metrics.BatchWriteErrors.Inc()
		c.setReady(false)
		delay := c.backoff(attempt)
		c.log.Error().Err(err).Int("rows", len(rows)).Int("attempt", attempt).Dur("retry_in", delay).
			Msg("writing batch failed; retrying the same batch, offsets stay uncommitted")
		if !sleep(ctx, delay) {
			return 0, ctx.Err()
		}
	}
}

// writeOnce makes one attempt at writing rows. If the database refuses the
// data itself, retrying cannot help: the rows are written one by one and a
// refused row is replaced, in rows, by a rejected placeholder.
func (c *Consumer) writeOnce(ctx context.Context, rows []Row) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
	defer cancel()
	n, err := c.writer.WriteBatch(ctx, rows)
	if _, refused := refusedByDatabase(err); !refused {
		return n, err
	}
	c.log.Warn().Err(err).Int("rows", len(rows)).Msg("database refused the batch; writing it row by row")
	total := 0
	for i := range rows {
		n, err := c.writer.WriteBatch(ctx, rows[i:i+1])
		if pgErr, refused := refusedByDatabase(err); refused {
			c.log.Error().Str("topic", rows[i].Source).Int32("partition", rows[i].Partition).
				Int64("offset", rows[i].Offset).Str("sqlstate", pgErr.Code).
				Msg("database refused a row; storing a rejected placeholder instead")
			placeholder := placeholderFor(rows[i], pgErr)
			if n, err = c.writer.WriteBatch(ctx, []Row{placeholder}); err == nil {
				rows[i] = placeholder
			}
		}
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func (c *Consumer) setReady(ok bool) {
	c.ready.Store(ok)
	if ok {
		c.metrics.Ready.Set(1)
	} else {
		c.metrics.Ready.Set(0)
	}
}

func (c *Consumer) fetchStarted() {
	c.mu.Lock()
	c.fetchingSince = c.now()
	c.mu.Unlock()
}

func (c *Consumer) fetchReturned(m kafka.Message, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fetchingSince = time.Time{}
	if err != nil {
		return
	}
	c.lastProgress = c.now()
	if m.HighWaterMark > 0 {
		c.backlog[topicPartition{m.Topic, m.Partition}] = max(0, m.HighWaterMark-m.Offset-1)
	}
}

// expBackoff is min·2^(attempt-1) capped at max, with "equal jitter": a
// random value in [d/2, d], so that replicas recovering together spread out.
func expBackoff(attempt int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	half := d / 2
	return half + rand.N(d-half+1)
}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
