package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
)

// executeBatch runs the batch handler of a batch route (batch.go) for
// jobs, dispatched together with the route's policy at that moment: every
// row is marked started (those found fenced or given back are left out),
// the handler gets the events in one call, and each row's outcome is
// decided by its own error (handlers.RowErrors) and the route's policy.
// A plain batch's outcomes go to the completer, each fenced by its own
// lease; a transactional batch's are written in its transaction
// (runTxBatch).
func (e *executor) executeBatch(jobs []*job, policy routePolicy) {
	defer func() {
		for _, j := range jobs {
			j.cancel(nil)
		}
	}()
	jobs = e.markBatchStarted(jobs)
	if len(jobs) == 0 {
		return
	}
	evs := make([]*handlers.Event, len(jobs))
	for i, j := range jobs {
		evs[i] = j.row.event()
	}
	route := e.reg.load().Lookup(evs[0].EventType)
	h := route.Batch
	if h == nil {
		h = oneByOne{route.Handler} // a reload made it a route of single rows
	}
	label := e.reg.typeLabel(evs[0].EventType)
	base, stop := batchContext(jobs)
	defer stop()
	ctx := base
	if policy.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, policy.Timeout, errAttemptTimeout)
		defer cancel()
		e.b.mu.Lock()
		stuck := e.clock.Now().Add(policy.Timeout + stuckGrace)
		for _, j := range jobs {
			j.stuckAfter = stuck
		}
		e.b.mu.Unlock()
	}
	if route.Tx {
		e.runTxBatch(base, ctx, jobs, evs, h, policy, label)
		return
	}
	errs, _ := rowErrors(e.callBatch(ctx, h, nil, evs, label), len(evs))
	e.submitBatch(ctx, jobs, evs, errs, policy, label)
}

// markBatchStarted marks every job of a batch started at once (each mark
// may wait for a statement: one after the other they would be a round
// trip each) and returns those whose handler may run.
func (e *executor) markBatchStarted(jobs []*job) []*job {
	ok := make([]bool, len(jobs))
	var wg sync.WaitGroup
	for i := 1; i < len(jobs); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok[i] = e.starts.markStarted(jobs[i])
		}()
	}
	ok[0] = e.starts.markStarted(jobs[0])
	wg.Wait()
	run := make([]*job, 0, len(jobs))
	for i, j := range jobs {
		if ok[i] {
			run = append(run, j)
		}
	}
	return run
}

// batchContext is the context of a batch's handler: it ends when any of
// its rows' contexts ends for the worker's sake (shutdown, a stuck
// handler) with that cause, or once every row's lease is lost; one lost
// lease alone leaves the others' work going (that row's outcome is
// fenced). stop releases it.
func batchContext(jobs []*job) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(jobs[0].ctx))
	var lost atomic.Int32
	stops := make([]func() bool, len(jobs))
	for i, j := range jobs {
		stops[i] = context.AfterFunc(j.ctx, func() {
			cause := context.Cause(j.ctx)
			if errors.Is(cause, errLeaseLost) && int(lost.Add(1)) < len(jobs) {
				return
			}
			cancel(cause)
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel(nil)
	}
}

// callBatch runs h on evs (in tx, for a transactional batch), with the
// engine's metrics and logging, turning a panic into the batch's error.
func (e *executor) callBatch(ctx context.Context, h handlers.TxBatchHandler, tx pgx.Tx, evs []*handlers.Event, label string) (err error) {
	start := e.clock.Now()
	func() {
		defer func() {
			if v := recover(); v != nil {
				e.metrics.panics.Inc()
				e.log.Error().Str("event_type", evs[0].EventType).Int("rows", len(evs)).
					Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).Msg("batch handler panicked")
				err = fmt.Errorf("%w: %v", errPanicked, v)
			}
		}()
		if tx != nil {
			ctx = handlers.ContextWithTx(ctx, tx)
		}
		err = h.HandleBatchTx(ctx, tx, evs)
	}()
	took := e.clock.Since(start)
	e.metrics.handlerObserver(handlerResult(err), label).Observe(took.Seconds())
	if l := e.log.Debug(); l.Enabled() {
		if err != nil {
			l = l.Err(err)
		}
		l.Str("event_type", evs[0].EventType).Int("rows", len(evs)).Dur("took", took).Msg("batch handler returned")
	}
	return err
}

// rowErrors is each row's error from a batch handler's err for n rows:
// none for nil; handlers.RowErrors as they are; any other error is the
// whole batch's, and every row's. A whole batch's error makes every row
// retried (a permanent one too, as no row is to blame; not so in a batch
// of one row); whole reports it.
func rowErrors(err error, n int) (errs []error, whole bool) {
	errs = make([]error, n)
	if err == nil {
		return errs, false
	}
	var re handlers.RowErrors
	switch {
	case errors.As(err, &re) && len(re) == n:
		copy(errs, re)
		return errs, false
	case errors.As(err, &re):
		err = fmt.Errorf("batch handler returned %d row errors for %d rows", len(re), n)
	case n == 1:
	case handlers.IsPermanent(err):
		err = fmt.Errorf("the batch of %d rows failed: %s", n, err.Error()) // not permanent for each row
	default:
		err = fmt.Errorf("the batch of %d rows failed: %w", n, err)
	}
	for i := range errs {
		errs[i] = err
	}
	return errs, true
}

// batchOutcomes decides each row's outcome from its error by the route's
// policy, and feeds the route's breaker with each.
func (e *executor) batchOutcomes(ctx context.Context, jobs []*job, evs []*handlers.Event, errs []error, policy routePolicy, label string) (rs []result, proceed []bool) {
	rs = make([]result, len(jobs))
	proceed = make([]bool, len(jobs))
	for i, j := range jobs {
		r := e.labeledOutcome(ctx, j, evs[i], label, errs[i], policy)
		switch r.outcome {
		case outcomeProcessed:
			e.b.routes.attemptEnded(j, true)
		case outcomeRetried, outcomeDead:
			e.b.routes.attemptEnded(j, false)
		}
		rs[i] = r
		proceed[i] = r.outcome == outcomeProcessed || (r.outcome == outcomeDead && policy.OnDead == handlers.OnDeadSkip)
	}
	return rs, proceed
}

// submitBatch hands the outcomes of a batch's rows, one error each, to
// the completer, once their places are freed.
func (e *executor) submitBatch(ctx context.Context, jobs []*job, evs []*handlers.Event, errs []error, policy routePolicy, label string) {
	rs, proceed := e.batchOutcomes(ctx, jobs, evs, errs, policy, label)
	e.submitResults(jobs, rs, proceed)
}

// runTxBatch runs a transactional batch: the handler in a transaction on
// the handlers' pool, then every row's outcome written in the same
// transaction by one fenced completion, and the commit. A row found
// fenced there (its lease lost while the handler ran) must not have its
// effects committed with its batch-mates': the transaction is rolled
// back, the fenced rows leave the batch, and the handler runs again on
// the others in a new transaction (the same attempt: nothing of the first
// run was committed). A whole batch's error, or a failed write, rolls
// back and hands every row's outcome to the completer. base is the
// batch's context without the route's timeout, for the transactions'
// connections; ctx the handler's.
func (e *executor) runTxBatch(base, ctx context.Context, jobs []*job, evs []*handlers.Event, h handlers.TxBatchHandler, policy routePolicy, label string) {
	for len(jobs) > 0 {
		tx, err := e.txdb.Begin(base)
		if err != nil {
			e.metrics.dbErrors.WithLabelValues("tx").Inc()
			rs := make([]result, len(jobs))
			for i, j := range jobs {
				rs[i] = e.rel.result(j, fmt.Sprintf("released unattempted: no transaction for its handler: %v", err))
				if context.Cause(j.ctx) == nil {
					rs[i].delay = policy.retry.NextRetry(1) // the database is unwell: not at once
				}
			}
			e.submitResults(jobs, rs, make([]bool, len(jobs)))
			return
		}
		errs, whole := rowErrors(e.callBatch(ctx, h, tx, evs, label), len(evs))
		if whole {
			_ = tx.Rollback(context.WithoutCancel(base))
			e.submitBatch(ctx, jobs, evs, errs, policy, label)
			return
		}
		rs, proceed := e.batchOutcomes(ctx, jobs, evs, errs, policy, label)
		done := e.clock.Now()
		fenced, err := e.completeTx(tx, jobs, rs, done)
		if err == nil && len(fenced) == 0 {
			err = e.commitTx(tx)
			if err == nil {
				delay := e.clock.Since(done).Seconds()
				for range jobs {
					e.metrics.outcomeWriteDelay.Observe(delay)
				}
				e.b.batchReturned(jobs, proceed)
				now := e.clock.Now()
				tallyResults(e.metrics, now, rs)
				for i, j := range jobs {
					e.b.forget(j)
					applied(e.metrics, &e.log, rs[i])
				}
				e.b.routes.signalOrdered(evs[0].EventType)
				return
			}
		}
		_ = tx.Rollback(context.WithoutCancel(base))
		if err != nil {
			// The outcomes go through the completer, fenced: should the
			// commit have happened after all, they find the tokens gone.
			e.metrics.dbErrors.WithLabelValues("tx").Inc()
			errs, _ := rowErrors(fmt.Errorf("write the batch's outcomes: %w", err), len(evs))
			e.submitBatch(ctx, jobs, evs, errs, policy, label)
			return
		}
		// Some rows are someone else's now: the others run again without them.
		keep, keepEvs := jobs[:0:0], evs[:0:0]
		var gone []*job
		for i, j := range jobs {
			if fenced[j.row.ID] {
				gone = append(gone, j)
				e.metrics.fenced.Inc()
				e.log.Warn().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
					Msg("fenced: lease lost while the transactional batch ran; the batch runs again without it")
				continue
			}
			keep, keepEvs = append(keep, j), append(keepEvs, evs[i])
		}
		e.b.batchReturned(gone, make([]bool, len(gone)))
		for _, j := range gone {
			e.b.forget(j)
		}
		jobs, evs = keep, keepEvs
	}
}

// submitResults hands rs, the results of jobs, to the completer once
// their places are freed.
func (e *executor) submitResults(jobs []*job, rs []result, proceed []bool) {
	chained := e.b.batchReturned(jobs, proceed)
	for i := range rs {
		rs[i].chained = chained[i]
		e.out.submit(rs[i])
	}
}

// completeTx writes rs, the outcomes of jobs at done, in tx with one
// fenced completion (driver.CompleteRecorded, sorted by id), with the
// attempts the rows' histories keep (historyOf), so that they commit with
// the batch; it returns the rows it found fenced.
func (e *executor) completeTx(tx pgx.Tx, jobs []*job, rs []result, done time.Time) (fenced map[int64]bool, err error) {
	completions := make([]driver.Completion, len(rs))
	for i := range rs {
		rs[i].chained = e.b.chained(jobs[i])
		completions[i] = rs[i].completion()
	}
	slices.SortFunc(completions, func(a, b driver.Completion) int { return cmp.Compare(a.ID, b.ID) })
	wctx, cancel := context.WithTimeout(e.stopCtx, e.cfg.StatementTimeout)
	defer cancel()
	ordered, blocking := e.b.routes.OrderedTypes()
	got, err := driver.CompleteRecorded(wctx, tx, completions, driver.Ordering{OrderedTypes: ordered, BlockingTypes: blocking},
		e.historyOf(rs, done))
	if err != nil {
		return nil, err
	}
	if len(got) == len(completions) {
		return nil, nil
	}
	fenced = make(map[int64]bool, len(completions)-len(got))
	for _, c := range completions {
		fenced[c.ID] = true
	}
	for _, id := range got {
		delete(fenced, id)
	}
	return fenced, nil
}

// commitTx commits a batch's transaction, within the statement timeout
// and the hard deadline.
func (e *executor) commitTx(tx pgx.Tx) error {
	wctx, cancel := context.WithTimeout(e.stopCtx, e.cfg.StatementTimeout)
	defer cancel()
	if err := tx.Commit(wctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// oneByOne runs a route's per-row handler as a batch handler, row after
// row: a batch dispatched before a reload made its route one of single
// rows.
type oneByOne struct{ h handlers.Handler }

func (o oneByOne) HandleBatchTx(ctx context.Context, tx pgx.Tx, evs []*handlers.Event) error {
	errs := make(handlers.RowErrors, len(evs))
	failed := false
	for i, ev := range evs {
		if tx != nil {
			// Each row's writes are its own: a failed row's are undone.
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if errs[i] = o.h.Handle(ctx, ev); errs[i] != nil {
				_ = sp.Rollback(ctx)
			} else if err := sp.Commit(ctx); err != nil {
				return err
			}
		} else {
			errs[i] = o.h.Handle(ctx, ev)
		}
		failed = failed || errs[i] != nil
	}
	if !failed {
		return nil
	}
	return errs
}
