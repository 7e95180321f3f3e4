package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
)

// maxErrorLen caps last_error so a huge error message cannot bloat rows.
const maxErrorLen = 2000

// execute runs the handler for one claimed row and submits the outcome.
func (p *Pool) execute(j *job) {
	ctx := j.ctx
	defer j.cancel(nil)
	if errors.Is(context.Cause(ctx), errLeaseLost) {
		p.finish(j) // lost while waiting in the queue: not ours to run
		return
	}

	ev := j.row.event()
	route := p.registry.Lookup(ev.EventType)
	start := time.Now()

	var err error
	if route.TxHandler != nil {
		var fenced bool
		fenced, err = p.runTx(ctx, j, ev, route.TxHandler)
		if fenced {
			p.finish(j)
			return
		}
	} else {
		err = p.runPlain(ctx, ev, route.Handler)
	}

	if !p.finish(j) {
		return // released at shutdown already
	}
	r := p.outcome(ctx, j, ev, err)
	p.metrics.handlerDuration.WithLabelValues(r.outcome).Observe(time.Since(start).Seconds())
	if route.TxHandler != nil && err == nil {
		// Already committed together with the handler's writes.
		p.metrics.completed.WithLabelValues(outcomeProcessed).Inc()
		p.rowLog(zerolog.DebugLevel, r).Msg("processed")
		return
	}
	p.submit(r)
}

// runPlain calls a plain handler, turning a panic into an error.
func (p *Pool) runPlain(ctx context.Context, ev *handlers.Event, h handlers.Handler) (err error) {
	defer p.recoverPanic(ev, &err)
	return h.Handle(ctx, ev)
}

// runTx runs a transactional handler inside the transaction that marks the
// row processed. The row is marked first, fenced by the lease token, so the
// row stays locked while the handler writes. fenced reports that the lease
// was lost before the handler ran (nothing was done).
func (p *Pool) runTx(ctx context.Context, j *job, ev *handlers.Event, h handlers.TxHandler) (fenced bool, err error) {
	tx, err := p.db.Begin(ctx)
	if err != nil {
		p.metrics.dbErrors.WithLabelValues("tx").Inc()
		return false, fmt.Errorf("begin transaction: %w", err)
	}
	defer func() {
		if err != nil || fenced {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	tag, err := tx.Exec(ctx, completeTxSQL, j.row.ID, j.token)
	if err != nil {
		p.metrics.dbErrors.WithLabelValues("tx").Inc()
		return false, fmt.Errorf("mark processed: %w", err)
	}
	if tag.RowsAffected() == 0 {
		p.metrics.fenced.Inc()
		p.log.Warn().Int64("row_id", ev.ID).Str("event_id", ev.EventID).Str("event_type", ev.EventType).
			Msg("fenced: lease lost before the transactional handler ran")
		return true, nil
	}
	if err = p.callTx(ctx, tx, ev, h); err != nil {
		return false, err
	}
	if err = tx.Commit(ctx); err != nil {
		p.metrics.dbErrors.WithLabelValues("tx").Inc()
		return false, fmt.Errorf("commit: %w", err)
	}
	return false, nil
}

func (p *Pool) callTx(ctx context.Context, tx pgx.Tx, ev *handlers.Event, h handlers.TxHandler) (err error) {
	defer p.recoverPanic(ev, &err)
	return h.HandleTx(ctx, tx, ev)
}

func (p *Pool) recoverPanic(ev *handlers.Event, err *error) {
	if v := recover(); v != nil {
		p.metrics.panics.Inc()
		p.log.Error().Int64("row_id", ev.ID).Str("event_id", ev.EventID).Str("event_type", ev.EventType).
			Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).Msg("handler panicked")
		*err = fmt.Errorf("handler panicked: %v", v)
	}
}

// outcome turns a handler's error into the row's next state.
func (p *Pool) outcome(ctx context.Context, j *job, ev *handlers.Event, err error) result {
	r := result{id: j.row.ID, token: j.token, eventID: ev.EventID, eventType: ev.EventType}
	switch {
	case err == nil:
		r.status, r.outcome = "processed", outcomeProcessed
	case errors.Is(context.Cause(ctx), errShutdown) && !handlers.IsPermanent(err):
		return p.releaseResult(j)
	case handlers.IsPermanent(err):
		r.status, r.outcome = "dead", outcomeDead
		r.lastError = errText(err)
	case ev.Attempt >= p.cfg.MaxAttempts:
		r.status, r.outcome = "dead", outcomeDead
		r.lastError = errText(fmt.Errorf("attempt %d of %d: %w", ev.Attempt, p.cfg.MaxAttempts, err))
	default:
		r.status, r.outcome = "received", outcomeRetried
		r.delay = p.cfg.RetryPolicy.NextRetry(ev.Attempt)
		if d, ok := handlers.RetryDelay(err); ok {
			r.delay = min(max(d, 0), p.cfg.MaxRetryDelay)
		}
		r.lastError = errText(fmt.Errorf("attempt %d of %d: %w", ev.Attempt, p.cfg.MaxAttempts, err))
	}
	return r
}

// releaseResult returns the row unattempted: received, due now, attempt not
// counted.
func (p *Pool) releaseResult(j *job) result {
	return result{
		id: j.row.ID, token: j.token, eventID: j.row.EventID, eventType: j.row.EventType,
		status: "received", release: true, outcome: outcomeReleased,
		lastError: errText(errors.New("released unfinished at worker shutdown")),
	}
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

func (p *Pool) rowLog(level zerolog.Level, r result) *zerolog.Event {
	e := p.log.WithLevel(level).Int64("row_id", r.id).Str("event_id", r.eventID).Str("event_type", r.eventType)
	if r.lastError != nil {
		e = e.Str("error", *r.lastError)
	}
	return e
}
