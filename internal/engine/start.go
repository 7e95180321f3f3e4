package engine

import (
	"context"
	"sync"
	"time"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/driver"
)

// Start marks. The database must know that a row's handler runs before it
// runs: a handler that kills the process (a Go fatal error, an OOM kill, a
// log.Fatal in a library) must cost its row an attempt, or the rescuer
// refunds it and the row crashes the process for ever. A claim marks
// started (inbox.started) the rows it hands straight to idle handlers and
// those expected to start very soon (routeState.startSoon); the start of
// any other row (one that waited in its route's queue, or behind the row
// before it in its key's chain) is recorded before its handler runs, in
// its claim's start bits (inbox_starts, migration 010: a bit per row of the
// claim, one small row per claim). The marks of the rows about to start
// while one mark statement is in flight go together in the next one
// (sql/mark_starts.sql), which writes each claim touched once: never a
// write per row.

// claimStarts is what the pool knows of one claim's start bits (by lease
// token). Guarded by the books' lock.
type claimStarts struct {
	bits    []byte // bit claim_pos - 1 set for each row recorded started
	version int64  // bumped at every change of bits
	held    int    // the claim's jobs still on the books
	written bool   // a starts row may exist in the database
}

// set sets or clears pos's bit (pos from 1) and reports whether it changed.
func (c *claimStarts) set(pos int64, on bool) bool {
	if pos < 1 {
		return false
	}
	i, mask := (pos-1)/8, byte(1)<<((pos-1)%8)
	if on && int(i) >= len(c.bits) {
		c.bits = append(c.bits, make([]byte, int(i)+1-len(c.bits))...)
	}
	if int(i) >= len(c.bits) || (c.bits[i]&mask != 0) == on {
		return false
	}
	c.bits[i] ^= mask
	c.version++
	return true
}

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
	// ahead: written ahead of the row's start (books.premarkLocked); void once
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
	done    []int64       // tokens of claims whose rows are all done: their starts row goes
	closed  bool          // the mark loop ended: no statement will run
	wake    chan struct{} // signalled when a mark is added
}

// premarkHorizon is how far ahead starts are marked: the rows of a route
// expected to start within it, at the route's measured rate, are marked by
// their claim (routeState.startSoon), or while they wait in the route's
// queue (books.premarkLocked), so that a fast route's handlers do not each wait
// for a mark's round trip. A row marked ahead that has not started when the
// process dies is charged an attempt like a row that ran: at most this much
// of the route's work, and each such row is then a suspect (job.suspect),
// run alone, so it shares no second crash. A slow route's rows (expected to
// wait longer) are marked as they start.
const premarkHorizon = 20 * time.Millisecond

// queueAhead queues the marks the books write ahead of their rows' starts
// (books.premarkLocked): they go in the next mark statement, or are
// answered at risk once the mark writers ended (markQueue).
func (l *leaser) queueAhead(ahead []*startMark) {
	l.marks.mu.Lock() // lock order: the books', then marks.mu
	if l.marks.closed {
		for _, m := range ahead {
			m.done <- startAtRisk
		}
	} else {
		l.marks.pending = append(l.marks.pending, ahead...)
	}
	l.marks.mu.Unlock()
	signal(l.marks.wake)
}

// claimDone has the next mark statement delete the starts row of the
// claim token, whose jobs all left the books (markQueue).
func (l *leaser) claimDone(token int64) {
	l.marks.mu.Lock() // lock order: the books', then marks.mu
	l.marks.done = append(l.marks.done, token)
	l.marks.mu.Unlock()
	signal(l.marks.wake)
}

// numMarkWriters is how many start mark statements may run at once: while
// one waits on its commit, the marks of the next rows go in another.
const numMarkWriters = 2

// markStarted makes sure the database knows that j's handler starts, and
// reports whether the handler may run. If not, j's row was given back
// unstarted (or found fenced), and its books are settled.
func (l *leaser) markStarted(j *job) bool {
	l.b.mu.Lock()
	if j.dbStarted && !j.suspect {
		l.b.mu.Unlock()
		return true
	}
	if m := j.premark; m != nil && !j.suspect {
		// Written ahead (books.premarkLocked), not yet answered: wait for it.
		l.b.mu.Unlock()
		return l.markAnswered(j, m)
	}
	// A suspect is marked even when its claim marked it: the rows that
	// finished before it must not share its crash.
	m := &startMark{j: j, done: make(chan startOutcome, 1)}
	if j.suspect {
		for _, o := range l.b.jobs {
			if o != j && o.state != jobRunning && o.dbStarted {
				m.idle = append(m.idle, o)
			}
		}
	} else if pred, ok := l.b.jobs[j.row.Pred]; ok && j.row.Pred != 0 && pred.token == j.token && pred.state == jobDone {
		m.idle = append(m.idle, pred)
	}
	l.b.mu.Unlock()

	l.marks.mu.Lock()
	if l.marks.closed {
		m.done <- startAtRisk
	} else {
		l.marks.pending = append(l.marks.pending, m)
	}
	l.marks.mu.Unlock()
	signal(l.marks.wake)
	return l.markAnswered(j, m)
}

// markAnswered waits for j's start mark m to be answered, and reports
// whether j's handler may run; if not, it settles j's books.
func (l *leaser) markAnswered(j *job, m *startMark) bool {
	switch <-m.done {
	case startMarked:
		// Unless shutdown gave the row back meanwhile (releaseStuck).
		l.b.mu.Lock()
		defer l.b.mu.Unlock()
		return j.state == jobRunning
	case startFenced:
		l.metrics.leaseLost.Inc()
		l.log.Warn().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
			Msg("lease lost before the handler started: not run")
		waits := l.b.handlerReturned(j)
		l.b.follow(j, waits, false)
		l.b.forget(j)
	default:
		l.metrics.leaseAtRisk.Inc()
		l.log.Warn().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
			Msg("start of the handler not recorded in time: giving the row back unstarted")
		waits := l.b.handlerReturned(j)
		l.b.follow(j, waits, false)
		l.rel.release(j, "released unstarted: its start could not be recorded in time")
	}
	return false
}

// markLoop writes the start marks in batches until ctx ends (numMarkWriters
// of them run); then it answers every mark left (and every later one) at
// risk.
func (l *leaser) markLoop(ctx context.Context) {
	defer func() {
		l.marks.mu.Lock()
		left := l.marks.pending
		l.marks.pending, l.marks.closed = nil, true
		l.marks.mu.Unlock()
		for _, m := range left {
			m.done <- startAtRisk
		}
	}()
	retry := backoff.NewRetrier(backoff.Exponential{Base: 10 * time.Millisecond, Max: l.cfg.renewTick()})
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.marks.wake:
		}
		for {
			l.marks.mu.Lock()
			batch, done := l.marks.pending, l.marks.done
			l.marks.pending, l.marks.done = nil, nil
			l.marks.mu.Unlock()
			if len(batch) == 0 && len(done) == 0 {
				break
			}
			signal(l.marks.wake) // marks added meanwhile go in another writer's statement
			err := l.writeMarks(ctx, batch, done)
			if err == nil {
				retry.Succeeded()
				continue
			}
			// Tried again: the bits as the pool then holds them.
			l.marks.mu.Lock()
			l.marks.pending = append(batch, l.marks.pending...)
			l.marks.done = append(done, l.marks.done...)
			l.marks.mu.Unlock()
			wait := retry.Failed()
			l.metrics.dbErrors.WithLabelValues("start").Inc()
			l.log.Error().Err(err).Int("rows", len(batch)).Dur("retry_in", wait).Msg("recording handler starts failed")
			if !backoff.Sleep(ctx, wait) {
				return
			}
		}
	}
}

// writeMarks records the starts of batch (and the rows they tell idle) in
// one statement, deletes the starts rows of the done claims, and answers
// each mark, unless the statement failed.
func (l *leaser) writeMarks(ctx context.Context, batch []*startMark, done []int64) error {
	sent := l.clock.Now()
	live := batch[:0:0]
	touched := make(map[int64]*claimStarts)
	var unmark []driver.Lease
	l.b.mu.Lock()
	for _, m := range batch {
		switch {
		case m.ahead && m.j.premark != m:
			continue // void: nobody waits for it (the row is marked again when it starts)
		case context.Cause(m.j.ctx) == errLeaseLost:
			m.done <- startFenced
			continue
		case sent.Add(l.cfg.startMargin()).After(m.j.leaseUntil):
			// As in dispatchLocked: a lease not renewed for a while could
			// overlap with a rescuer's claim.
			m.done <- startAtRisk
			continue
		}
		for _, o := range m.idle {
			if o.state == jobRunning || !o.dbStarted {
				continue // started meanwhile, or not marked: nothing to tell
			}
			if o.claimMarked {
				unmark = append(unmark, driver.Lease{ID: o.row.ID, Token: o.token})
				o.claimMarked = false
			}
			if c := l.b.claims[o.token]; c != nil {
				c.set(o.row.Rank, false)
				touched[o.token] = c
			}
			// Marked again, should it start.
			o.dbStarted, o.premark = false, nil
		}
		// Written whether or not the bit changed now: a statement that
		// failed is tried again with the bits as they are then (a version
		// the database has already is left as it is).
		if c := l.b.claims[m.j.token]; c != nil {
			c.set(m.j.row.Rank, true)
			touched[m.j.token] = c
		}
		live = append(live, m)
	}
	claims := make([]driver.ClaimBits, 0, len(touched))
	for t, c := range touched {
		c.written = true
		claims = append(claims, driver.ClaimBits{Token: t, Bits: append([]byte(nil), c.bits...), Version: c.version})
	}
	l.b.mu.Unlock()
	if len(live) == 0 && len(done) == 0 && len(unmark) == 0 {
		return nil
	}
	// Bounded like a renewal: a mark that takes longer than a lease is
	// useless.
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Lease)
	defer cancel()
	if err := driver.MarkStarts(ctx, l.markDB, driver.StartMarks{Claims: claims, Unmark: unmark, DoneTokens: done}); err != nil {
		return err
	}
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	for _, m := range live {
		if m.ahead && m.j.premark != m {
			continue // unmarked meanwhile by a suspect's mark
		}
		m.j.dbStarted = true
		m.done <- startMarked
	}
	return nil
}
