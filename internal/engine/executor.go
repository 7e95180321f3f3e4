package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/maintenance"
)

// maxErrorLen caps last_error so a huge error message cannot bloat rows.
const maxErrorLen = 2000

// executor runs the handlers of the jobs the pool dispatches: each job on
// a goroutine of its own, an idle one reused when there is one (see loop),
// marked started first (the leaser), its outcome decided by its route's
// policy and handed to the completer. It is not a service: its goroutines
// start with the jobs (run) and belong to them, and the pool's shutdown
// waits for the handlers (wait) within its budget, not for ever; quitIdle
// ends the idle goroutines.
type executor struct {
	b      *books       // the jobs' states
	starts starter      // records a handler's start before it runs: the leaser
	out    outcomes     // writes the outcomes: the completer
	rel    *releaser    // gives rows back unattempted
	reg    *registryRef // the handlers
	archetype
	txdb    *pgxpool.Pool   // transactional handlers' transactions; set before jobs run
	stopCtx context.Context // ends at the hard shutdown deadline; set before jobs run
	idle    chan execTask   // unbuffered: idle goroutines wait for a job on it
	quit    chan struct{}   // closed by quitIdle: idle goroutines end
	stopped sync.Once
	running sync.WaitGroup // the jobs handed over and not yet done
	// offer is the slot of a goroutine whose handler just returned, while
	// it frees the handler's place (handlerReturned): the job dispatched
	// into that place is put in the slot, and run next by that goroutine,
	// rather than woken on another one. A hand-over through idle costs a
	// wake-up and a switch of goroutines per row; at full rate most rows
	// start this way.
	offer atomic.Pointer[execSlot]
}

// execSlot is the place where run leaves a job for the goroutine that
// offered the slot (executor.offer). Its state goes from slotOffered to
// slotTaking (run took the slot) to slotFull (the task is written), or to
// slotWithdrawn (its goroutine took the offer back).
type execSlot struct {
	state atomic.Int32
	task  execTask // written by run between slotTaking and slotFull
}

// The states of an execSlot.
const (
	slotOffered int32 = iota
	slotTaking
	slotFull
	slotWithdrawn
)

// starter is what the executor needs of the leaser: the database must
// know that a handler starts before it runs.
type starter interface {
	// markStarted reports whether j's handler may run (see
	// leaser.markStarted).
	markStarted(j *job) bool
}

// outcomes is what the executor and the releaser need of the completer:
// it takes the outcomes to write.
type outcomes interface {
	// submit hands r over, waiting for room.
	submit(r result)
	// trySubmit hands r over unless that would wait; it reports whether it
	// did.
	trySubmit(r result) bool
}

// newExecutor returns an executor of b's jobs, which marks their starts
// through starts, hands their outcomes to out, and gives rows back through
// rel; the handlers are reg's.
func newExecutor(a archetype, b *books, starts starter, out outcomes, rel *releaser, reg *registryRef) *executor {
	return &executor{
		archetype: a, b: b, starts: starts, out: out, rel: rel, reg: reg,
		idle: make(chan execTask), quit: make(chan struct{}),
	}
}

// quitIdle ends the idle goroutines; those running a job end after it.
func (e *executor) quitIdle() { e.stopped.Do(func() { close(e.quit) }) }

// run hands t to the goroutine that offered its slot, or to an idle
// goroutine, or to a new one. The books' lock is held (by dispatchLocked): it never
// blocks.
func (e *executor) run(t execTask) {
	e.running.Add(1)
	if s := e.offer.Swap(nil); s != nil && s.state.CompareAndSwap(slotOffered, slotTaking) {
		s.task = t
		s.state.Store(slotFull)
		return
	}
	e.start(t)
}

// start hands t, counted in running, to an idle goroutine or a new one.
func (e *executor) start(t execTask) {
	select {
	case e.idle <- t: // an idle goroutine takes it
	default:
		go e.loop(t)
	}
}

// execTask is one job handed to an executor, with its route's policy at
// dispatch.
type execTask struct {
	j      *job
	batch  []*job // a batch route's batch (batch.go), instead of j
	policy routePolicy
}

// executorIdle is how long an executor goroutine waits for its next job
// before it ends.
const executorIdle = 2 * time.Second

// executor runs t, then the jobs handed to it while it waits idle (on
// executor.idle), until it has waited executorIdle or the pool stopped.
// Reusing goroutines keeps their grown stacks: a new goroutine per row
// spent a sixth of the process's time growing stacks.
func (e *executor) loop(t execTask) {
	idle := time.NewTimer(executorIdle)
	defer idle.Stop()
	slot := new(execSlot)
	for {
		var next execTask
		ok := false
		if t.batch != nil {
			e.executeBatch(t.batch, t.policy)
		} else {
			next, ok = e.execute(t.j, t.policy, slot)
		}
		e.running.Done()
		if ok {
			t = next // dispatched into this goroutine's slot: run it now
			continue
		}
		idle.Reset(executorIdle)
		select {
		case t = <-e.idle:
		case <-idle.C:
			return
		case <-e.quit:
			return
		}
	}
}

// wait waits up to d, or until abort is closed, for every running handler
// to return, and reports whether they all did.
func (e *executor) wait(d time.Duration, abort <-chan struct{}) bool {
	done := make(chan struct{})
	go func() { e.running.Wait(); close(done) }()
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	case <-abort:
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// execute runs the handler for one claimed row, started by its route's
// dispatch with the route's policy at that moment, once the database knows
// it starts, and submits the outcome. slot is its goroutine's
// (executor.offer): when a job was dispatched into it, execute returns it,
// ok, for the goroutine to run next.
func (e *executor) execute(j *job, policy routePolicy, slot *execSlot) (next execTask, ok bool) {
	defer j.cancel(nil)
	if !e.starts.markStarted(j) {
		return execTask{}, false // fenced or given back: not run
	}
	ev := j.row.event()
	route := e.reg.load().Lookup(ev.EventType)
	label := e.reg.typeLabel(ev.EventType)
	// A value, not a pointer: on the usual path (no transaction) it stays
	// on the stack; runTx takes its own copy.
	h := engineHandler{e: e, next: route.Handler, label: label}

	var tx pgx.Tx
	if route.Tx {
		// The connection is waited for under the row's own context, not
		// the attempt's timeout (which is the handler's), with its lease
		// renewed meanwhile; a row whose handler could not run for want of
		// one costs no attempt.
		var err error
		if tx, err = e.txdb.Begin(j.ctx); err != nil {
			e.metrics.dbErrors.WithLabelValues("tx").Inc()
			waits := e.b.handlerReturned(j)
			e.b.follow(j, waits, false)
			r := e.rel.result(j, fmt.Sprintf("released unattempted: no transaction for its handler: %v", err))
			if context.Cause(j.ctx) == nil {
				r.delay = policy.retry.NextRetry(1) // the database is unwell: not at once
			}
			e.out.submit(r)
			return execTask{}, false
		}
		// Whatever happens below, an unfinished transaction is rolled back;
		// after a commit Rollback does nothing.
		defer func() { _ = tx.Rollback(context.WithoutCancel(j.ctx)) }()
	}

	ctx := j.ctx
	if policy.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, policy.Timeout, errAttemptTimeout)
		defer cancel()
		e.b.mu.Lock()
		j.stuckAfter = e.clock.Now().Add(policy.Timeout + stuckGrace)
		e.b.mu.Unlock()
	}
	var err error
	if route.Tx {
		var committed, fenced bool
		committed, fenced, err = e.runTx(ctx, tx, j, ev, &engineHandler{e: e, next: route.Handler, label: label})
		if committed || fenced {
			waits := e.b.handlerReturned(j)
			e.b.follow(j, waits, committed)
			e.b.forget(j)
			if committed {
				e.b.routes.attemptEnded(j, true)
				e.metrics.completedCounter(outcomeProcessed, label).Inc()
				now := e.clock.Now()
				e.metrics.maintenance.Tally.Add(now, maintenance.Outcome{Route: label, Processed: true, Latency: now.Sub(j.row.ReceivedAt)})
				rowLog(&e.log, zerolog.DebugLevel, result{id: j.row.ID, eventID: ev.EventID, eventType: ev.EventType}).Msg("processed")
			}
			return execTask{}, false
		}
	} else {
		err = h.Handle(ctx, ev)
	}
	// The attempt's outcome reaches the route's breaker before the row's
	// place is freed: the failure that opens it is counted before a claim
	// may fill the place with the next row of the route.
	r := e.labeledOutcome(ctx, j, ev, label, err, policy)
	switch r.outcome {
	case outcomeProcessed:
		e.b.routes.attemptEnded(j, true)
	case outcomeRetried, outcomeDead:
		e.b.routes.attemptEnded(j, false)
	}
	// The row's place is freed with this goroutine's slot offered: the row
	// dispatched into it, if any, runs next on this goroutine.
	slot.state.Store(slotOffered)
	e.offer.Store(slot)
	waits := e.b.handlerReturned(j)
	next, ok = e.withdraw(slot)
	if ok && waits {
		// follow may wait (submitting the rows it cuts from the chain): the
		// next row is not to wait with it.
		e.start(next)
		ok = false
	}
	r.chained = e.b.follow(j, waits, r.outcome == outcomeProcessed || (r.outcome == outcomeDead && policy.OnDead == handlers.OnDeadSkip))
	if ok && e.out.trySubmit(r) {
		return next, true
	}
	if ok {
		// The completer is behind and submit waits for room: the next row
		// starts meanwhile, elsewhere.
		e.start(next)
	}
	e.out.submit(r)
	return execTask{}, false
}

// withdraw takes slot's offer back once the handler's place is freed,
// and returns the job that run put in it meanwhile, if it did.
func (e *executor) withdraw(slot *execSlot) (execTask, bool) {
	if slot.state.CompareAndSwap(slotOffered, slotWithdrawn) {
		e.offer.CompareAndSwap(slot, nil)
		return execTask{}, false
	}
	for slot.state.Load() != slotFull {
		// Taken by a run on another goroutine, still writing the task
		// (under the books' lock, a few instructions): the atomic store of
		// slotFull follows the write, so once it is seen the task is too.
		runtime.Gosched()
	}
	t := slot.task
	slot.task = execTask{}
	return t, true
}

// errAttemptTimeout is the cause of a handler's context ending at its
// route's timeout.
var errAttemptTimeout = errors.New("attempt timed out (the route's timeout)")

// runTx runs a transactional handler in tx, a transaction on the
// handlers' own pool, and, if it succeeds, marks the row processed in the
// same transaction, fenced by the lease token, and commits. committed
// reports that the row is processed with the handler's writes; fenced that
// the lease was lost (everything rolled back). Otherwise err is the
// attempt's failure, and nothing was written (the caller rolls tx back).
func (e *executor) runTx(ctx context.Context, tx pgx.Tx, j *job, ev *handlers.Event, h handlers.Handler) (committed, fenced bool, err error) {
	if err := h.Handle(handlers.ContextWithTx(ctx, tx), ev); err != nil {
		return false, false, err
	}
	// The handler succeeded: mark and commit even if shutdown cancels the
	// handler's context now (the work is done), within the statement
	// timeout and the hard deadline. A lost lease still fences the mark.
	done := e.clock.Now()
	wctx, cancel := context.WithTimeout(e.stopCtx, e.cfg.StatementTimeout)
	defer cancel()
	ordered, blocking := e.b.routes.OrderedTypes()
	marked, err := driver.CompleteTx(wctx, tx, j.row.ID, j.token, e.b.chained(j),
		driver.Ordering{OrderedTypes: ordered, BlockingTypes: blocking})
	if err != nil {
		e.metrics.dbErrors.WithLabelValues("tx").Inc()
		return false, false, err
	}
	if !marked {
		e.metrics.fenced.Inc()
		e.log.Warn().Int64("row_id", ev.ID).Str("event_id", ev.EventID).Str("event_type", ev.EventType).
			Msg("fenced: lease lost while the transactional handler ran; its writes are rolled back")
		return false, true, nil
	}
	// The end of a row that failed before is kept in its history, written
	// in the transaction so that it commits with the outcome (its failed
	// attempts went through the completer, as every failure does).
	if !e.cfg.noHistory && keptAttempt(outcomeProcessed, j.row.Attempts) {
		at := driver.Attempt{RowID: j.row.ID, Attempt: j.row.Attempts, StartedAt: j.runAt, FinishedAt: done, Outcome: outcomeProcessed}
		if at.StartedAt.IsZero() {
			at.StartedAt = done
		}
		if err := driver.RecordAttempts(wctx, tx, e.cfg.ID, []driver.Attempt{at}); err != nil {
			e.metrics.dbErrors.WithLabelValues("tx").Inc()
			return false, false, err
		}
	}
	if err := tx.Commit(wctx); err != nil {
		// The commit's fate is unknown if its reply was lost. The outcome
		// written next is fenced by the token: if the commit did happen,
		// the token is gone and the retry is counted as fenced, not applied.
		e.metrics.dbErrors.WithLabelValues("tx").Inc()
		return false, false, fmt.Errorf("commit: %w", err)
	}
	e.metrics.outcomeWriteDelay.Observe(e.clock.Since(done).Seconds())
	e.b.routes.signalOrdered(ev.EventType)
	return true, false, nil
}

// engineHandler is the engine's own layer around every handler, in the
// order of middleware, outermost first: metrics (the handler's duration by
// result and event type), logging (a debug line per attempt), and recovery
// (a panic becomes the attempt's error). The registry's middleware runs
// inside it. One value per attempt, rather than a chain of closures: this
// runs for every row.
type engineHandler struct {
	e     *executor
	next  handlers.Handler
	label string // the event_type metric label
}

// Handle runs the handler with the engine's metrics, logging and recovery.
func (h *engineHandler) Handle(ctx context.Context, ev *handlers.Event) error {
	start := h.e.clock.Now()
	err := h.recovered(ctx, ev)
	took := h.e.clock.Since(start)
	h.e.metrics.handlerObserver(handlerResult(err), h.label).Observe(took.Seconds())
	if l := h.e.log.Debug(); l.Enabled() {
		if err != nil {
			l = l.Err(err)
		}
		l.Int64("row_id", ev.ID).Str("event_id", ev.EventID).Str("event_type", ev.EventType).
			Int("attempt", ev.Attempt).Dur("took", took).Msg("handler returned")
	}
	return err
}

// handlerResult is the result label of a handler's (or a batch's) error
// for the handler duration metric.
func handlerResult(err error) string {
	switch {
	case errors.Is(err, errPanicked):
		return "panic"
	case err != nil:
		return "error"
	}
	return "ok"
}

// recovered runs the handler, turning a panic into an error.
func (h *engineHandler) recovered(ctx context.Context, ev *handlers.Event) (err error) {
	defer h.e.recoverPanic(ev, &err)
	return h.next.Handle(ctx, ev)
}

// errPanicked marks a handler's panic turned into an error.
var errPanicked = errors.New("handler panicked")

func (e *executor) recoverPanic(ev *handlers.Event, err *error) {
	if v := recover(); v != nil {
		e.metrics.panics.Inc()
		e.log.Error().Int64("row_id", ev.ID).Str("event_id", ev.EventID).Str("event_type", ev.EventType).
			Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).Msg("handler panicked")
		*err = fmt.Errorf("%w: %v", errPanicked, v)
	}
}

// outcome turns a handler's error into the row's next state, by its
// route's policy.
func (e *executor) outcome(ctx context.Context, j *job, ev *handlers.Event, err error, policy routePolicy) result {
	return e.labeledOutcome(ctx, j, ev, e.reg.typeLabel(ev.EventType), err, policy)
}

// labeledOutcome is outcome with the row's event_type metric label, which
// execute already has.
func (e *executor) labeledOutcome(ctx context.Context, j *job, ev *handlers.Event, label string, err error, policy routePolicy) result {
	r := result{job: j, id: j.row.ID, token: j.token, eventID: ev.EventID, eventType: ev.EventType,
		typeLabel: label, attempt: ev.Attempt}
	switch {
	case err == nil:
		r.status, r.outcome = status.Processed, outcomeProcessed
	case errors.Is(context.Cause(ctx), errShutdown) && !handlers.IsPermanent(err):
		return e.rel.result(j, "released unfinished at worker shutdown")
	case handlers.IsPermanent(err):
		r.status, r.outcome = status.Dead, outcomeDead
		r.lastError = errText(err)
	case handlers.IsNotSent(err):
		// The event never reached the target: the attempt is not counted,
		// whatever the attempts left (see handlers.NotSent).
		r = e.rel.result(j, fmt.Sprintf("attempt %d not counted, event not sent: %v", ev.Attempt, err))
		r.delay = policy.retry.NextRetry(max(ev.Attempt, 1))
	case ev.Attempt >= policy.MaxAttempts:
		r.status, r.outcome = status.Dead, outcomeDead
		r.lastError = errText(fmt.Errorf("attempt %d of %d: %w", ev.Attempt, policy.MaxAttempts, err))
	default:
		r.status, r.outcome = status.Received, outcomeRetried
		r.delay = policy.retry.NextRetry(ev.Attempt)
		if d, ok := handlers.RetryDelay(err); ok {
			r.delay = min(max(d, 0), policy.maxDelay)
		}
		if context.Cause(ctx) == errAttemptTimeout {
			err = fmt.Errorf("%w after %s: %w", errAttemptTimeout, policy.Timeout, err)
		}
		r.lastError = errText(fmt.Errorf("attempt %d of %d: %w", ev.Attempt, policy.MaxAttempts, err))
	}
	return r
}

// errText makes err storable in last_error: valid UTF-8 without NUL bytes
// (a text column accepts neither), at most maxErrorLen bytes.
func errText(err error) *string {
	s := strings.ToValidUTF8(strings.ReplaceAll(err.Error(), "\x00", ""), "\uFFFD")
	if len(s) > maxErrorLen {
		cut := maxErrorLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return &s
}
