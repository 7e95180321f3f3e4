package worker

import (
	"context"
	"sync"
	"time"

	"github.com/inboxd/inboxd/internal/backoff"
)

// Start marks. The database must know that a row's handler runs before it
// runs: a handler that kills the process (a Go fatal error, an OOM kill, a
// log.Fatal in a library) must cost its row an attempt, or the rescuer
// refunds it and the row crashes the process for ever. A claim marks
// started the rows it hands straight to idle handlers; a row that waited
// in its route's queue, or behind the row before it in its key's chain, is
// marked by its executor just before its handler starts. The marks of the
// rows about to start while one mark statement is in flight go together in
// the next one (the lease renewal statement, sql/renew.sql): one statement
// per batch, never one per row.

// startMark is one row whose handler waits for the database to know that
// it starts.
type startMark struct {
	j *job
	// idle are rows whose handlers do not run (finished with their
	// outcomes not yet written, or not started), which the same statement
	// tells the database, so that a crash in j's handler is not charged to
	// them: the row before j in its key's chain, and, when j is a suspect,
	// every other row of the pool not running (see job.suspect).
	idle []*job
	done chan startOutcome
	// ahead: written ahead of the row's start (premarkLocked); void once
	// j.premark is no longer it (a suspect's mark unmarked the row).
	ahead bool
}

// startOutcome is what became of a start mark.
type startOutcome uint8

const (
	// startMarked: the database knows; the handler may run.
	startMarked startOutcome = iota
	// startFenced: the row was rescued or claimed by another worker.
	startFenced
	// startAtRisk: the mark could not be written while the lease was safe
	// (the database failing, or the pool stopped): the row goes back
	// unstarted.
	startAtRisk
)

// startMarks gathers the start marks waiting for their statement.
type startMarks struct {
	mu      sync.Mutex
	pending []*startMark
	closed  bool          // the mark loop ended: no statement will run
	wake    chan struct{} // signalled when a mark is added
}

// premarkHorizon is how far ahead starts are marked: the rows of a route
// expected to start within it, at the route's measured rate, are marked by
// their claim (routeState.startSoon), or while they wait in the route's
// queue (premarkLocked), so that a fast route's handlers neither wait for
// a mark's round trip each nor cost a statement each (a route of no-op
// handlers ran at 0.55x its rate when every queued row had a mark of its
// own written as it started, 0.64x with marks written ahead). A row marked ahead that
// has not started when the process dies is charged an attempt like a row
// that ran: at most this much of the route's work, and each such row is
// then a suspect (job.suspect), run alone, so it shares no second crash.
// A slow route's rows (expected to wait longer) are marked as they start.
const premarkHorizon = 20 * time.Millisecond

// premarkLocked writes ahead the start marks of rs's queued rows expected
// to start within premarkHorizon. Suspects and chain followers are marked
// as they start: their marks also unmark other rows. Pool.mu must be held.
func (p *Pool) premarkLocked(rs *routeState) {
	n := min(len(rs.queue), int(rs.rate*premarkHorizon.Seconds()))
	var ahead []*startMark
	for _, j := range rs.queue[:n] {
		if j.dbStarted || j.premark != nil || j.suspect || j.row.Pred != 0 {
			continue
		}
		j.premark = &startMark{j: j, done: make(chan startOutcome, 1), ahead: true}
		ahead = append(ahead, j.premark)
	}
	if len(ahead) == 0 {
		return
	}
	p.marks.mu.Lock() // lock order: Pool.mu, then marks.mu
	if p.marks.closed {
		for _, m := range ahead {
			m.done <- startAtRisk
		}
	} else {
		p.marks.pending = append(p.marks.pending, ahead...)
	}
	p.marks.mu.Unlock()
	signal(p.marks.wake)
}

// numMarkWriters is how many start mark statements may run at once: while
// one waits on its commit, the marks of the next rows go in another.
const numMarkWriters = 2

// startBusyWait is how long a mark that found its row locked by another of
// the worker's statements (a lease renewal, typically) waits before the
// next try.
const startBusyWait = time.Millisecond

// markStarted makes sure the database knows that j's handler starts, and
// reports whether the handler may run. If not, j's row was found fenced or
// given back unstarted, and its books are settled.
func (p *Pool) markStarted(j *job) bool {
	p.mu.Lock()
	if j.dbStarted && !j.suspect {
		p.mu.Unlock()
		return true
	}
	if m := j.premark; m != nil && !j.suspect {
		// Written ahead (premarkLocked), not yet answered: wait for it.
		p.mu.Unlock()
		return p.markAnswered(j, m)
	}
	// A suspect is marked even when its claim marked it: the rows that
	// finished before it must not share its crash.
	m := &startMark{j: j, done: make(chan startOutcome, 1)}
	if j.suspect {
		for _, o := range p.jobs {
			if o != j && o.state != jobRunning {
				m.idle = append(m.idle, o)
			}
		}
	} else if pred, ok := p.jobs[j.row.Pred]; ok && j.row.Pred != 0 && pred.token == j.token && pred.state == jobDone {
		m.idle = append(m.idle, pred)
	}
	p.mu.Unlock()

	p.marks.mu.Lock()
	if p.marks.closed {
		m.done <- startAtRisk
	} else {
		p.marks.pending = append(p.marks.pending, m)
	}
	p.marks.mu.Unlock()
	signal(p.marks.wake)
	return p.markAnswered(j, m)
}

// markAnswered waits for j's start mark m to be answered, and reports
// whether j's handler may run; if not, it settles j's books.
func (p *Pool) markAnswered(j *job, m *startMark) bool {
	switch <-m.done {
	case startMarked:
		// Unless shutdown gave the row back meanwhile (releaseStuck).
		p.mu.Lock()
		defer p.mu.Unlock()
		return j.state == jobRunning
	case startFenced:
		p.metrics.leaseLost.Inc()
		p.log.Warn().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
			Msg("lease lost before the handler started: not run")
		p.handlerReturned(j)
		p.follow(j, false)
		p.forget(j)
	default:
		p.metrics.leaseAtRisk.Inc()
		p.log.Warn().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
			Msg("start of the handler not recorded in time: giving the row back unstarted")
		p.handlerReturned(j)
		p.follow(j, false)
		p.submit(p.releaseResult(j, "released unstarted: its start could not be recorded in time"))
	}
	return false
}

// markLoop writes the start marks in batches until ctx ends (numMarkWriters
// of them run); then it answers every mark left (and every later one) at
// risk.
func (p *Pool) markLoop(ctx context.Context) {
	defer func() {
		p.marks.mu.Lock()
		left := p.marks.pending
		p.marks.pending, p.marks.closed = nil, true
		p.marks.mu.Unlock()
		for _, m := range left {
			m.done <- startAtRisk
		}
	}()
	retry := backoff.NewRetrier(backoff.Exponential{Base: 10 * time.Millisecond, Max: p.cfg.renewTick()})
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.marks.wake:
		}
		for {
			p.marks.mu.Lock()
			batch := p.marks.pending
			p.marks.pending = nil
			p.marks.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			signal(p.marks.wake) // marks added meanwhile go in another writer's statement
			again, err := p.writeMarks(ctx, batch)
			if len(again) == 0 {
				continue
			}
			p.marks.mu.Lock()
			p.marks.pending = append(again, p.marks.pending...)
			p.marks.mu.Unlock()
			wait := startBusyWait
			if err != nil {
				wait = retry.Failed()
				p.metrics.dbErrors.WithLabelValues("start").Inc()
				p.log.Error().Err(err).Int("rows", len(again)).Dur("retry_in", wait).Msg("recording handler starts failed")
			}
			if !backoff.Sleep(ctx, wait) {
				return
			}
			if err == nil {
				retry.Succeeded()
			}
		}
	}
}

// writeMarks runs one start mark statement for batch and answers each
// mark, except those to try again (their row was locked by another of the
// worker's statements, or the statement failed), which it returns.
func (p *Pool) writeMarks(ctx context.Context, batch []*startMark) (again []*startMark, err error) {
	sent := p.cfg.Now()
	rows := make([]renewal, 0, len(batch)+1)
	live := batch[:0:0]
	p.mu.Lock()
	// A row that a mark of this batch tells idle is not also marked ahead
	// in it: one statement changes a row once.
	var unmarked map[int64]bool
	for _, m := range batch {
		for _, o := range m.idle {
			if unmarked == nil {
				unmarked = make(map[int64]bool)
			}
			unmarked[o.row.ID] = true
		}
	}
	for _, m := range batch {
		switch {
		case m.ahead && (m.j.premark != m || unmarked[m.j.row.ID]):
			// Void (nobody waits for it: the row is queued, and marked
			// again when it starts).
			if m.j.premark == m {
				m.j.premark = nil
			}
			continue
		case context.Cause(m.j.ctx) == errLeaseLost:
			m.done <- startFenced
			continue
		case sent.Add(p.cfg.Lease / 3).After(m.j.leaseUntil):
			// As in dispatchLocked: a lease not renewed for a while could
			// overlap with a rescuer's claim.
			m.done <- startAtRisk
			continue
		}
		live = append(live, m)
		rows = append(rows, renewal{id: m.j.row.ID, token: m.j.token, started: true})
		idle := m.idle[:0]
		for _, o := range m.idle {
			if o.state != jobRunning { // started meanwhile: not idle any more
				idle = append(idle, o)
				rows = append(rows, renewal{id: o.row.ID, token: o.token, idle: true})
			}
		}
		m.idle = idle
	}
	p.mu.Unlock()
	if len(live) == 0 {
		return nil, nil
	}
	// Bounded like a renewal: a mark that takes longer than a lease is
	// useless.
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Lease)
	defer cancel()
	states, err := p.renewRows(ctx, p.markDB, rows)
	if err != nil {
		return live, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range live {
		switch states[m.j.row.ID] {
		case renewed:
			m.j.dbStarted = true
			for _, o := range m.idle {
				if o.state != jobRunning && o.state != jobDone && states[o.row.ID] == renewed {
					// Its claim marked it started (a suspect waiting for
					// this one), or a mark written ahead did: it is
					// marked again when it starts.
					o.dbStarted, o.premark = false, nil
				}
			}
			m.done <- startMarked
		case renewBusy:
			again = append(again, m)
		default:
			m.done <- startFenced
		}
	}
	return again, nil
}
