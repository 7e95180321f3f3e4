package ingest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/handoff"
)

// Source kinds: the bounded values of the source_kind label of the ingest
// metrics and of the readiness report.
const (
	// SourceKafka is a Kafka consumer group (Consumer).
	SourceKafka = "kafka"
	// SourceAMQP is a set of RabbitMQ queues (AMQPSource).
	SourceAMQP = "amqp"
	// SourceNATS is a set of NATS JetStream streams.
	SourceNATS = "nats"
)

// PipelineConfig is what the persist-then-ack pipeline, shared by every
// source, needs: batching, the mapping, the write retries and the shutdown
// budget. Zero fields take the defaults of Config.
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
	// handOff, when set, is the worker pool of this process, to which the
	// batches' rows are handed as they are stored while it has idle
	// handlers (the Inboxd's, set from source.Env). nil: every row waits
	// for a claim.
	handOff handoff.HandOff
}

// pipeline is the Config's pipeline part.
func (c Config) pipeline() PipelineConfig {
	return PipelineConfig{
		BatchSize: c.BatchSize, BatchTimeout: c.BatchTimeout, Linger: c.Linger, BatchBytes: c.BatchBytes,
		Mapping: c.Mapping, RetryBackoffMin: c.RetryBackoffMin, RetryBackoffMax: c.RetryBackoffMax,
		WriteTimeout: c.WriteTimeout, AckTimeout: c.CommitTimeout, CloseTimeout: c.CloseTimeout,
	}
}

// withDefaults applies Config's defaults (one place: Config.withDefaults).
func (p PipelineConfig) withDefaults() PipelineConfig {
	return Config{
		BatchSize: p.BatchSize, BatchTimeout: p.BatchTimeout, Linger: p.Linger, BatchBytes: p.BatchBytes,
		Mapping: p.Mapping, RetryBackoffMin: p.RetryBackoffMin, RetryBackoffMax: p.RetryBackoffMax,
		WriteTimeout: p.WriteTimeout, CommitTimeout: p.AckTimeout, CloseTimeout: p.CloseTimeout,
	}.withDefaults().pipeline()
}

// source is what the pipeline needs from a broker: it fetches, maps and
// acknowledges; the pipeline batches, writes, retries and decides when to
// acknowledge.
type source interface {
	// fetch blocks for the next message and returns it mapped to its row;
	// it returns ctx's error once ctx ends. An error wrapped in fatalError
	// stops the pipeline; any other is counted, logged by the pipeline and
	// followed by a backoff (the source reconnects on its next fetch if it
	// must).
	fetch(ctx context.Context) (Row, error)
	// seal ends the batch being filled: it returns the acknowledgement of
	// every message fetched since the previous seal. The pipeline calls it
	// at most once, only after the batch's rows are committed in the
	// inbox, and never for a batch it did not write.
	seal() ackFunc
	// fetchFailed words the warning logged for a fetch error.
	fetchFailed() string
}

// ackFunc acknowledges one batch to its broker.
type ackFunc func(ctx context.Context) error

// fatalError is a fetch error after which the source cannot go on.
type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
func (e fatalError) Unwrap() error { return e.err }

// pipeline is the persist-then-ack core that every source feeds: batching
// by count, bytes and time, the writer holding at most two batches, the
// insert with its retries and row-by-row fallback, the acknowledgement
// after the commit, readiness and metrics.
type pipeline struct {
	pcfg        PipelineConfig
	kind        string // SourceKafka, SourceAMQP, SourceNATS
	writer      inboxWriter
	log         zerolog.Logger
	metrics     *ingestMetrics
	now         func() time.Time
	backoff     func(attempt int) time.Duration
	sourceReady func() bool // the broker side of readiness

	running  atomic.Bool
	writesOK atomic.Bool // the last batch write succeeded

	lastProgress atomic.Int64 // unix nanoseconds; 0 before the first progress
}

// newPipeline returns the pipeline of one source of the given kind; pcfg
// must have its defaults applied.
func newPipeline(kind string, pcfg PipelineConfig, w inboxWriter, logger zerolog.Logger, reg prometheus.Registerer,
	sourceReady func() bool) (*pipeline, error) {
	metrics, err := newMetrics(reg, kind)
	if err != nil {
		return nil, err
	}
	p := &pipeline{
		pcfg: pcfg, kind: kind, writer: w, metrics: metrics, now: time.Now, sourceReady: sourceReady,
		log: logger.With().Str("component", "ingest").Str("source_kind", kind).Logger(),
	}
	if kind == SourceKafka {
		// Kafka's log lines stay as they were before there were other sources.
		p.log = logger.With().Str("component", "ingest").Logger()
	}
	retry := backoff.Exponential{Base: pcfg.RetryBackoffMin, Max: pcfg.RetryBackoffMax}
	p.backoff = retry.Delay
	return p, nil
}

// ready reports whether the pipeline runs, its last write did not fail and
// its source is ready.
func (p *pipeline) ready() bool {
	return p.running.Load() && p.writesOK.Load() && p.sourceReady()
}

// setReady records whether the last batch write succeeded.
func (p *pipeline) setReady(ok bool) {
	p.writesOK.Store(ok)
	p.updateReady()
}

// updateReady publishes ready on the gauge.
func (p *pipeline) updateReady() {
	if p.ready() {
		p.metrics.Ready.Set(1)
	} else {
		p.metrics.Ready.Set(0)
	}
}

// progressed records that a message was fetched or a batch written.
func (p *pipeline) progressed() { p.lastProgress.Store(p.now().UnixNano()) }

// progress returns when a message was last fetched or a batch written.
func (p *pipeline) progress() time.Time {
	n := p.lastProgress.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// runSession is the Run of a source that holds one broker session at a
// time (RabbitMQ, NATS): once at a time, ready from the start, src fed
// through the loop until ctx ends, then the session closed. reset runs
// first, under no lock of the pipeline's (the source clears its own
// state); starting logs the source's settings.
func (p *pipeline) runSession(ctx context.Context, src source, reset, starting, closeSession func()) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("ingest: Run is already running")
	}
	defer func() {
		p.running.Store(false)
		p.updateReady()
	}()
	reset()
	p.setReady(true)
	starting()

	_, err := p.loop(ctx, src)

	p.setReady(false)
	closeSession()
	p.log.Info().Msg("ingest stopped")
	return err
}

// loop fetches, batches and flushes until ctx is cancelled. It returns the
// deadline by which the source must be closed: CloseTimeout after the
// cancellation.
//
// Writes run on a goroutine of their own (a writer), one batch at a time and
// in fetch order, each batch acknowledged right after its rows, while the
// next batch fills: reading and mapping overlap the database's work. A
// batch is handed to the writer when it is full, when BatchTimeout has
// passed since its first message, or, while the writer is idle, as soon as
// no message has come for Linger: at low rates rows reach the inbox within
// a millisecond or two, at high rates batches grow while the writer works.
// At most two batches are in hand: one written, one filling.
func (p *pipeline) loop(ctx context.Context, src source) (time.Time, error) {
	var (
		closing     batchDeadline // ends when the filling batch must go
		fetchErrors int
		runErr      error
	)
	defer closing.stop()
	// Writes outlive ctx by the close budget: the batch in hand at shutdown
	// is still written and acknowledged within it.
	wctx, stopWrites := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWrites()
	var (
		closeOnce sync.Once
		deadline  time.Time
	)
	beginClose := func() time.Time {
		closeOnce.Do(func() {
			deadline = time.Now().Add(p.pcfg.CloseTimeout)
			time.AfterFunc(p.pcfg.CloseTimeout, stopWrites)
		})
		return deadline
	}
	stopWatch := context.AfterFunc(ctx, func() { beginClose() })
	defer stopWatch()
	w := newBatchWriter(p, &closing)
	go w.run(wctx)
	b := w.next()
	hand := func() {
		closing.stop()
		b.ack = src.seal()
		w.write(b)
		b = w.next()
	}

loop:
	for ctx.Err() == nil {
		fetchCtx := ctx
		if len(b.rows) > 0 {
			fetchCtx = closing.context()
		}
		row, err := src.fetch(fetchCtx)

		var fatal fatalError
		switch {
		case err == nil:
			fetchErrors = 0
			p.metrics.MessagesFetched.Inc()
			if len(b.rows) == 0 {
				closing.start(ctx, p.lingerFor(w))
			}
			b.add(row)
			if len(b.rows) < p.pcfg.BatchSize && b.bytes < p.pcfg.BatchBytes {
				continue
			}
		case ctx.Err() != nil:
			break loop
		case len(b.rows) > 0 && closing.expired():
			// The batch's time is up, or the writer is free for it.
		case errors.As(err, &fatal):
			runErr = fatal.err
			break loop
		default:
			fetchErrors++
			p.metrics.FetchErrors.Inc()
			delay := p.backoff(fetchErrors)
			p.log.Warn().Err(err).Int("attempt", fetchErrors).Dur("retry_in", delay).Msg(src.fetchFailed())
			if len(b.rows) > 0 {
				hand()
			}
			sleep(ctx, delay)
			continue
		}
		hand()
	}

	// Shutting down: write and acknowledge the batch in hand, within the
	// close budget. What cannot be written is not acknowledged, and is
	// delivered again later.
	dl := beginClose()
	if len(b.rows) > 0 {
		b.ack = src.seal()
		w.write(b)
	}
	w.close()
	return dl, runErr
}

// lingerFor is how long the batch just started may wait: Linger while the
// writer is idle, else BatchTimeout (the writer's end cuts it short).
func (p *pipeline) lingerFor(w *batchWriter) time.Duration {
	if w.idle() {
		return min(p.pcfg.Linger, p.pcfg.BatchTimeout)
	}
	return p.pcfg.BatchTimeout
}

// batchWriter writes batches in order on its own goroutine. Two batches
// circulate between the loop (filling) and the writer (writing).
type batchWriter struct {
	p       *pipeline
	closing *batchDeadline
	full    chan *batch   // to the writer
	free    chan *batch   // back to the loop, written
	pending atomic.Int32  // batches handed over and not yet written
	done    chan struct{} // closed when run returns
}

func newBatchWriter(p *pipeline, closing *batchDeadline) *batchWriter {
	w := &batchWriter{p: p, closing: closing, full: make(chan *batch, 1), free: make(chan *batch, 2),
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
		if ctx.Err() != nil || w.p.flush(ctx, b) != nil {
			w.p.log.Warn().Int("rows", len(b.rows)).
				Msg("batch not written at shutdown; it is not acknowledged and the messages will be delivered again")
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
