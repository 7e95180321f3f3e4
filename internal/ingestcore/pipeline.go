package ingestcore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/backoff"
)

// source is what the pipeline needs from a broker: it fetches, maps and
// acknowledges; the pipeline batches, writes, retries and decides when to
// acknowledge.
type source interface {
	// fetch blocks for the next message and returns it mapped to its row;
	// it returns ctx's error once ctx ends. An error wrapped in FatalError
	// stops the pipeline; any other is counted, logged by the pipeline and
	// followed by a backoff (the source reconnects on its next fetch if it
	// must).
	Fetch(ctx context.Context) (Row, error)
	// seal ends the batch being filled: it returns the acknowledgement of
	// every message fetched since the previous seal. The pipeline calls it
	// at most once, only after the batch's rows are committed in the
	// inbox, and never for a batch it did not write.
	Seal() AckFunc
	// fetchFailed words the warning logged for a fetch error.
	FetchFailed() string
}

// AckFunc acknowledges one batch to its broker.
type AckFunc func(ctx context.Context) error

// FatalError is a fetch error after which the source cannot go on.
type FatalError struct{ Err error }

func (e FatalError) Error() string { return e.Err.Error() }
func (e FatalError) Unwrap() error { return e.Err }

// Pipeline is the persist-then-ack core that every source feeds: batching
// by count, bytes and time, the writer holding at most two batches, the
// insert with its retries and row-by-row fallback, the acknowledgement
// after the commit, readiness and metrics.
type Pipeline struct {
	Cfg         ingest.PipelineConfig
	kind        string // SourceKafka, SourceAMQP, SourceNATS
	Writer      InboxWriter
	Log         zerolog.Logger
	Metrics     *Metrics
	Now         func() time.Time
	Backoff     func(attempt int) time.Duration
	sourceReady func() bool // the broker side of readiness

	Running  atomic.Bool
	WritesOK atomic.Bool // the last batch write succeeded

	lastProgress atomic.Int64 // unix nanoseconds; 0 before the first progress
}

// NewPipeline returns the pipeline of one source of the given kind; pcfg
// must have its defaults applied.
func NewPipeline(kind string, pcfg ingest.PipelineConfig, w InboxWriter, logger zerolog.Logger, reg prometheus.Registerer,
	sourceReady func() bool) (*Pipeline, error) {
	metrics, err := NewMetrics(reg, kind)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{
		Cfg: pcfg, kind: kind, Writer: w, Metrics: metrics, Now: time.Now, sourceReady: sourceReady,
		Log: logger.With().Str("component", "ingest").Str("source_kind", kind).Logger(),
	}
	if kind == ingest.SourceKafka {
		// Kafka's log lines stay as they were before there were other sources.
		p.Log = logger.With().Str("component", "ingest").Logger()
	}
	retry := backoff.Exponential{Base: pcfg.RetryBackoffMin, Max: pcfg.RetryBackoffMax}
	p.Backoff = retry.Delay
	return p, nil
}

// IsReady reports whether the pipeline runs, its last write did not fail and
// its source is ready.
func (p *Pipeline) IsReady() bool {
	return p.Running.Load() && p.WritesOK.Load() && p.sourceReady()
}

// SetReady records whether the last batch write succeeded.
func (p *Pipeline) SetReady(ok bool) {
	p.WritesOK.Store(ok)
	p.UpdateReady()
}

// UpdateReady publishes ready on the gauge.
func (p *Pipeline) UpdateReady() {
	if p.IsReady() {
		p.Metrics.Ready.Set(1)
	} else {
		p.Metrics.Ready.Set(0)
	}
}

// Progressed records that a message was fetched or a batch written.
func (p *Pipeline) Progressed() { p.lastProgress.Store(p.Now().UnixNano()) }

// Progress returns when a message was last fetched or a batch written.
func (p *Pipeline) Progress() time.Time {
	n := p.lastProgress.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// RunSession is the Run of a source that holds one broker session at a
// time (RabbitMQ, NATS): once at a time, ready from the start, src fed
// through the loop until ctx ends, then the session closed. reset runs
// first, under no lock of the pipeline's (the source clears its own
// state); starting logs the source's settings.
func (p *Pipeline) RunSession(ctx context.Context, src source, reset, starting, closeSession func()) error {
	if !p.Running.CompareAndSwap(false, true) {
		return errors.New("ingest: Run is already running")
	}
	defer func() {
		p.Running.Store(false)
		p.UpdateReady()
	}()
	reset()
	p.SetReady(true)
	starting()

	_, err := p.Loop(ctx, src)

	p.SetReady(false)
	closeSession()
	p.Log.Info().Msg("ingest stopped")
	return err
}

// Loop fetches, batches and flushes until ctx is cancelled. It returns the
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
func (p *Pipeline) Loop(ctx context.Context, src source) (time.Time, error) {
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
			deadline = time.Now().Add(p.Cfg.CloseTimeout)
			time.AfterFunc(p.Cfg.CloseTimeout, stopWrites)
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
		b.ack = src.Seal()
		w.write(b)
		b = w.next()
	}

loop:
	for ctx.Err() == nil {
		fetchCtx := ctx
		if len(b.rows) > 0 {
			fetchCtx = closing.context()
		}
		row, err := src.Fetch(fetchCtx)

		var fatal FatalError
		switch {
		case err == nil:
			fetchErrors = 0
			p.Metrics.MessagesFetched.Inc()
			if len(b.rows) == 0 {
				closing.start(ctx, p.lingerFor(w))
			}
			b.add(row)
			if len(b.rows) < p.Cfg.BatchSize && b.bytes < p.Cfg.BatchBytes {
				continue
			}
		case ctx.Err() != nil:
			break loop
		case len(b.rows) > 0 && closing.expired():
			// The batch's time is up, or the writer is free for it.
		case errors.As(err, &fatal):
			runErr = fatal.Err
			break loop
		default:
			fetchErrors++
			p.Metrics.FetchErrors.Inc()
			delay := p.Backoff(fetchErrors)
			p.Log.Warn().Err(err).Int("attempt", fetchErrors).Dur("retry_in", delay).Msg(src.FetchFailed())
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
		b.ack = src.Seal()
		w.write(b)
	}
	w.close()
	return dl, runErr
}

// lingerFor is how long the batch just started may wait: Linger while the
// writer is idle, else BatchTimeout (the writer's end cuts it short).
func (p *Pipeline) lingerFor(w *batchWriter) time.Duration {
	if w.idle() {
		return min(p.Cfg.Linger, p.Cfg.BatchTimeout)
	}
	return p.Cfg.BatchTimeout
}

// batchWriter writes batches in order on its own goroutine. Two batches
// circulate between the loop (filling) and the writer (writing).
type batchWriter struct {
	p       *Pipeline
	closing *batchDeadline
	full    chan *batch   // to the writer
	free    chan *batch   // back to the loop, written
	pending atomic.Int32  // batches handed over and not yet written
	done    chan struct{} // closed when run returns
}

func newBatchWriter(p *Pipeline, closing *batchDeadline) *batchWriter {
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
			w.p.Log.Warn().Int("rows", len(b.rows)).
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

// Core is p: promoted through a source's embedded *Pipeline, it reaches
// the pipeline of an opened source (Opened.R) from outside the source's
// package, as the tests that look at its writer do.
func (p *Pipeline) Core() *Pipeline { return p }
