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

// Row statuses the worker writes.
const (
	statusReceived  = "received"
	statusProcessed = "processed"
	statusDead      = "dead"
)

// execute runs the handler for one claimed row and submits the outcome.
// stop ends at the hard shutdown deadline.
func (p *Pool) execute(stop context.Context, j *job) {
	defer j.cancel(nil)
	switch p.begin(j) {
	case beginSkip:
		return
	case beginRelease:
		p.metrics.leaseAtRisk.Inc()
		p.log.Warn().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
			Msg("lease not renewed in time: giving the row back unstarted")
		p.submit(p.releaseResult(j, "released unstarted: its lease could not be renewed in time"))
		return
	}

	ctx := j.ctx
	ev := j.row.event()
	route := p.registry.Load().Lookup(ev.EventType)
	start := time.Now()
	var err error
	if route.TxHandler != nil {
		var committed, fenced bool
		committed, fenced, err = p.runTx(stop, j, ev, route.TxHandler)
		if committed || fenced {
			p.handlerReturned(j)
			p.forget(j)
			if committed {
				label := p.typeLabel(ev.EventType)
				p.metrics.handlerDuration.WithLabelValues(outcomeProcessed, label).Observe(time.Since(start).Seconds())
				p.metrics.completed.WithLabelValues(outcomeProcessed, label).Inc()
				p.rowLog(zerolog.DebugLevel, result{id: j.row.ID, eventID: ev.EventID, eventType: ev.EventType}).Msg("processed")
			}
			return
		}
	} else {
		err = p.runPlain(ctx, ev, route.Handler)
	}
	p.handlerReturned(j)
	r := p.outcome(ctx, j, ev, err)
	p.metrics.handlerDuration.WithLabelValues(r.outcome, r.typeLabel).Observe(time.Since(start).Seconds())
	p.submit(r)
}

// runPlain calls a plain handler, turning a panic into an error.
func (p *Pool) runPlain(ctx context.Context, ev *handlers.Event, h handlers.Handler) (err error) {
	defer p.recoverPanic(ev, &err)
	return h.Handle(ctx, ev)
}

// runTx runs a transactional handler in a transaction on the handlers' own
// pool and, if it succeeds, marks the row processed in the same
// transaction, fenced by the lease token, and commits. committed reports
// that the row is processed with the handler's writes; fenced that the
// lease was lost (everything rolled back). Otherwise err is the attempt's
// failure, and nothing was written.
func (p *Pool) runTx(stop context.Context, j *job, ev *handlers.Event, h handlers.TxHandler) (committed, fenced bool, err error) {
	ctx := j.ctx
	tx, err := p.txdb.Begin(ctx)
	if err != nil {
		p.metrics.dbErrors.WithLabelValues("tx").Inc()
		return false, false, fmt.Errorf("begin transaction: %w", err)
	}
	// Whatever happens below, an unfinished transaction is rolled back;
	// after a commit Rollback does nothing.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := p.callTx(ctx, tx, ev, h); err != nil {
		return false, false, err
	}
	// The handler succeeded: mark and commit even if shutdown cancels the
	// handler's context now (the work is done), within the statement
	// timeout and the hard deadline. A lost lease still fences the mark.
	done := p.cfg.Now()
	wctx, cancel := context.WithTimeout(stop, p.cfg.StatementTimeout)
	defer cancel()
	tag, err := tx.Exec(wctx, completeTxSQL, pgx.NamedArgs{"id": j.row.ID, "token": j.token})
	if err != nil {
		p.metrics.dbErrors.WithLabelValues("tx").Inc()
		return false, false, fmt.Errorf("mark processed: %w", err)
	}
	if tag.RowsAffected() == 0 {
		p.metrics.fenced.Inc()
		p.log.Warn().Int64("row_id", ev.ID).Str("event_id", ev.EventID).Str("event_type", ev.EventType).
			Msg("fenced: lease lost while the transactional handler ran; its writes are rolled back")
		return false, true, nil
	}
	if err := tx.Commit(wctx); err != nil {
		// The commit's fate is unknown if its reply was lost. The outcome
		// written next is fenced by the token: if the commit did happen,
		// the token is gone and the retry is counted as fenced, not applied.
		p.metrics.dbErrors.WithLabelValues("tx").Inc()
		return false, false, fmt.Errorf("commit: %w", err)
	}
	p.metrics.outcomeWriteDelay.Observe(p.cfg.Now().Sub(done).Seconds())
	return true, false, nil
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
	r := result{job: j, id: j.row.ID, token: j.token, eventID: ev.EventID, eventType: ev.EventType,
		typeLabel: p.typeLabel(ev.EventType)}
	switch {
	case err == nil:
		r.status, r.outcome = statusProcessed, outcomeProcessed
	case errors.Is(context.Cause(ctx), errShutdown) && !handlers.IsPermanent(err):
		return p.releaseResult(j, "released unfinished at worker shutdown")
	case handlers.IsPermanent(err):
		r.status, r.outcome = statusDead, outcomeDead
		r.lastError = errText(err)
	case ev.Attempt >= p.cfg.MaxAttempts:
		r.status, r.outcome = statusDead, outcomeDead
		r.lastError = errText(fmt.Errorf("attempt %d of %d: %w", ev.Attempt, p.cfg.MaxAttempts, err))
	default:
		r.status, r.outcome = statusReceived, outcomeRetried
		r.delay = p.cfg.RetryPolicy.NextRetry(ev.Attempt)
		if d, ok := handlers.RetryDelay(err); ok {
			r.delay = min(max(d, 0), p.cfg.MaxRetryDelay)
		}
		r.lastError = errText(fmt.Errorf("attempt %d of %d: %w", ev.Attempt, p.cfg.MaxAttempts, err))
	}
	return r
}

// releaseResult returns the row unattempted: received, due now, attempt not
// counted, with why in last_error.
func (p *Pool) releaseResult(j *job, why string) result {
	return result{
		job: j, id: j.row.ID, token: j.token, eventID: j.row.EventID, eventType: j.row.EventType,
		typeLabel: p.typeLabel(j.row.EventType),
		status:    statusReceived, release: true, outcome: outcomeReleased,
		lastError: errText(errors.New(why)),
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
