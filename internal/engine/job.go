package engine

import (
	"context"
	"slices"
	"time"
)

// jobState is where a claimed row is in this worker.
type jobState uint8

const (
	// jobClaimed: claimed, not yet on the books (track puts it there).
	jobClaimed jobState = iota
	// jobQueued: claimed, waiting in its route's queue for a handler.
	jobQueued
	// jobRunning: its handler runs.
	jobRunning
	// jobWaiting: claimed behind the row before it in its ordered key's
	// chain (job.next of that row's job), not yet in its route's queue: it
	// joins the queue once that row ended so that the key may go on.
	jobWaiting
	// jobDone: its handler returned (or it was released without running);
	// its outcome waits to be written. The lease is still renewed, so a
	// database stall on completions cannot hand a finished row to another
	// worker.
	jobDone
)

// job is one claimed row, from its claim until its outcome is written (or
// found fenced). The fields after the comment are guarded by Pool.mu; its
// state changes only through Pool.moveLocked.
type job struct {
	ctx    context.Context // the handler's; cancelled on lease loss or shutdown
	cancel context.CancelCauseFunc
	row    claimedRow
	token  int64
	size   int64       // the row's bytes (claimedRow.size), counted against ClaimBytes until the handler returns
	route  *routeState // the route it runs on
	// suspect: the row was last rescued after a started attempt: its
	// handler may have killed its worker. Suspects run one at a time in a
	// pool, so that the one that kills the process again does not take
	// the others, innocent, with it every time (each crash charges every
	// row whose handler ran): only rows that were not suspects can share
	// a crash with it, and each of those at most once before it becomes a
	// suspect itself.
	suspect bool

	// Guarded by Pool.mu.
	state       jobState
	dbStarted   bool       // the database knows its handler starts (the claim or a start mark said so)
	claimMarked bool       // its claim marked it started (inbox.started); unmarking it is a write of its row
	premark     *startMark // its start mark, written ahead while it waits near the front of its route's queue (see premarkLocked)
	leaseUntil  time.Time  // when the lease ends at the latest, by the local clock
	runAt       time.Time  // when its handler was dispatched
	doneAt      time.Time  // when the handler returned; outcome-write delay starts here
	stuckAfter  time.Time  // when a running handler counts as stuck: its route's timeout + stuckGrace (zero: no timeout)
	stuck       bool       // found stuck: its lease is no longer renewed
	next        *job       // the next row of its key's chain, waiting for this one (jobWaiting); see follow
}

// track adds claimed jobs to the books and their routes' queues, in claim
// order, and starts what may start.
func (p *Pool) track(jobs []*job) {
	p.mu.Lock()
	releases := p.trackLocked(jobs)
	p.mu.Unlock()
	p.releaseAtRisk(releases)
}

// trackLocked is track under Pool.mu; it returns the jobs whose leases are
// at risk, to be given back once Pool.mu is released.
func (p *Pool) trackLocked(jobs []*job) (releases []*job) {
	touched := make(map[*routeState]bool)
	now := time.Now()
	for _, j := range jobs {
		if c := p.claims[j.token]; c != nil {
			c.held++
		} else {
			p.claims[j.token] = &claimStarts{held: 1}
		}
		j.route = p.routeForLocked(j.row.EventType)
		j.route.lastRows = now
		// A chain's follower waits for the row before it, claimed by the
		// same statement (so already on the books).
		if pred, ok := p.jobs[j.row.Pred]; ok && j.row.Pred != 0 && pred.token == j.token && pred.next == nil {
			pred.next = j
			p.moveLocked(j, jobWaiting, false)
		} else {
			p.moveLocked(j, jobQueued, false)
		}
		p.jobs[j.row.ID] = j
		touched[j.route] = true
	}
	for rs := range touched {
		releases = append(releases, p.dispatchLocked(rs)...)
	}
	return releases
}

// dispatchLocked starts handlers for rs's queued jobs while the route has
// room, unless the pool is stopping. It returns the jobs whose leases are
// at risk, to be given back by the caller once Pool.mu is released.
func (p *Pool) dispatchLocked(rs *routeState) (atRisk []*job) {
	for !p.stopping && rs.running < rs.limit && len(rs.queue) > 0 {
		j := rs.queue[0]
		if j.suspect && p.suspectRunning && context.Cause(j.ctx) != errLeaseLost {
			break // it waits for the suspect that runs (see job.suspect)
		}
		if context.Cause(j.ctx) == errLeaseLost {
			// Fenced while waiting: the row is someone else's; no outcome
			// to write. The rows of its key's chain behind it go back (their
			// leases, renewed with it, are at risk or lost too).
			p.moveLocked(j, jobDone, false)
			p.forgetLocked(j)
			atRisk = append(atRisk, p.cutChainLocked(j)...)
			continue
		}
		if time.Now().Add(p.cfg.startMargin()).After(j.leaseUntil) {
			// Healthy renewals keep at least half a lease ahead; this one has
			// not been renewed for a while. Running it now could overlap with
			// a rescuer's claim, so the row goes back instead, and so do the
			// rows of its key's chain behind it.
			p.moveLocked(j, jobDone, false)
			atRisk = append(atRisk, j)
			atRisk = append(atRisk, p.cutChainLocked(j)...)
			continue
		}
		// Its bytes stay held until the handler returns. Its executor
		// marks it started first, unless the claim did (see start.go).
		j.runAt = time.Now()
		p.moveLocked(j, jobRunning, false)
		p.suspectRunning = p.suspectRunning || j.suspect
		// The policy is read under the lock: a reload may change it.
		p.executor.run(execTask{j: j, policy: rs.policy})
	}
	p.leaser.premarkLocked(rs)
	return atRisk
}

// cutChainLocked takes the rows of j's key chain that wait behind j off the
// books' queues and returns them, marked done: they are to be given back
// unstarted. Pool.mu must be held.
func (p *Pool) cutChainLocked(j *job) []*job {
	var cut []*job
	for n := j.next; n != nil && n.state == jobWaiting; n = n.next {
		p.moveLocked(n, jobDone, false)
		cut = append(cut, n)
	}
	j.next = nil
	return cut
}

// follow ends j's part in its key's chain once j's handler returned
// (waits: handlerReturned found a row waiting behind j), and reports
// whether a row waited behind j: if j ended so that its key may go on
// (proceed: processed, or dead on a route that skips), the next row of the
// chain joins the front of its route's queue; otherwise the rows waiting
// behind j go back unstarted, and a later claim finds them behind j
// (parking them while j waits to be retried, or blocks its key).
func (p *Pool) follow(j *job, waits, proceed bool) (chained bool) {
	if !waits {
		return false // most rows have no chain: no second lock for it
	}
	p.mu.Lock()
	n := j.next
	if n == nil {
		p.mu.Unlock()
		return false
	}
	var atRisk, cut []*job
	if proceed && !p.stopping && n.state == jobWaiting && context.Cause(j.ctx) != errLeaseLost {
		j.next = nil
		p.moveLocked(n, jobQueued, true)
		atRisk = p.dispatchLocked(n.route)
	} else {
		cut = p.cutChainLocked(j)
	}
	p.mu.Unlock()
	p.releaseAtRisk(atRisk)
	for _, c := range cut {
		p.completer.submit(p.releaseResult(c, "released unstarted: the row before it in its key did not finish"))
	}
	return true
}

// chained reports whether the next row of j's key waits behind j in this
// worker: j's completion then need not unpark it (follow runs it, or gives
// it back due).
func (p *Pool) chained(j *job) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return j.next != nil
}

// releaseAtRisk gives back, unattempted, rows whose leases could not be
// renewed in time.
func (p *Pool) releaseAtRisk(jobs []*job) {
	for _, j := range jobs {
		p.metrics.leaseAtRisk.Inc()
		p.log.Warn().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
			Msg("lease not renewed in time: giving the row back unstarted")
		p.completer.submit(p.releaseResult(j, "released unstarted: its lease could not be renewed in time"))
	}
}

// handlerReturned marks j's handler finished: its slot and bytes are free
// (the route may start its next row), its lease is kept until the outcome
// is written. It reports whether a row of j's key waits behind j, for
// follow: j.next is read under the lock here, and after j is done only
// j's own executor (follow) changes it.
func (p *Pool) handlerReturned(j *job) (waits bool) {
	p.mu.Lock()
	var releases []*job
	if j.state == jobRunning {
		j.doneAt = time.Now()
		j.route.returned++
		j.route.ranFor(j.doneAt.Sub(j.runAt))
		p.moveLocked(j, jobDone, false)
		releases = p.dispatchLocked(j.route)
		if j.suspect {
			// The next suspect, whatever its route, may go.
			p.suspectRunning = false
			for _, rs := range p.routes {
				releases = append(releases, p.dispatchLocked(rs)...)
			}
		}
	}
	waits = j.next != nil
	p.mu.Unlock()
	j.row.Payload, j.row.Key = nil, nil // the handler is done with them
	p.releaseAtRisk(releases)
	signal(p.freed)
	return waits
}

// abandon marks a queued or running job done without an outcome from its
// handler (shutdown releases it); it reports whether the job was still
// queued or running. A handler that returns later finds it done.
func (p *Pool) abandon(j *job) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch j.state {
	case jobQueued, jobRunning, jobWaiting:
		p.moveLocked(j, jobDone, false)
		return true
	}
	return false
}

// forget removes j from the books once its outcome is written or fenced.
func (p *Pool) forget(j *job) {
	if j == nil {
		return
	}
	p.mu.Lock()
	p.forgetLocked(j)
	p.mu.Unlock()
	signal(p.freed)
}

// forgetLocked is forget without the signal; Pool.mu must be held.
func (p *Pool) forgetLocked(j *job) {
	if j == nil {
		return
	}
	if cur, ok := p.jobs[j.row.ID]; ok && cur == j {
		delete(p.jobs, j.row.ID)
		p.claimDoneLocked(j)
	}
}

// moveLocked is the one transition of a job's state, from j.state to to,
// and the one place that keeps the books with it: j's route's queue
// (leaving jobQueued takes j out of it; entering it puts j at the back, or
// at the front when front), the route's running and waiting counts, the
// bytes held (those of queued, waiting and running jobs, against
// ClaimBytes), and the gauges. The pool's queued and running counts are
// derived from the routes' (counts). Pool.mu must be held.
func (p *Pool) moveLocked(j *job, to jobState, front bool) {
	from, rs := j.state, j.route
	if from == to {
		return
	}
	switch from {
	case jobQueued:
		rs.dequeue(j)
	case jobRunning:
		rs.running--
	case jobWaiting:
		rs.waiting--
	}
	switch to {
	case jobQueued:
		if front {
			rs.queue = slices.Insert(rs.queue, 0, j)
		} else {
			rs.queue = append(rs.queue, j)
		}
	case jobRunning:
		rs.running++
	case jobWaiting:
		rs.waiting++
	}
	if holds(from) != holds(to) {
		if holds(to) {
			p.heldBytes += j.size
		} else {
			p.heldBytes -= j.size
		}
	}
	j.state = to
	p.routeGaugesLocked(rs)
	p.updateGaugesLocked()
}

// holds reports whether a job in state s holds its bytes and a place in
// its route: from its claim until its handler returns (or it is given
// back).
func holds(s jobState) bool { return s == jobQueued || s == jobWaiting || s == jobRunning }

// countsLocked returns the jobs waiting for a handler (queued, or behind
// the row before them in a key's chain) and the jobs whose handler runs,
// all routes. Pool.mu must be held.
func (p *Pool) countsLocked() (queued, running int) {
	for _, rs := range p.routes {
		queued += len(rs.queue) + rs.waiting
		running += rs.running
	}
	return queued, running
}

func (p *Pool) updateGaugesLocked() {
	queued, running := p.countsLocked()
	p.metrics.inflight.Set(float64(queued + running))
	p.metrics.heldBytes.Set(float64(p.heldBytes))
}

// load reports the rows held (queued and running) and the handlers
// running, across routes.
func (p *Pool) load() (held, running int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	queued, running := p.countsLocked()
	return queued + running, running
}

// snapshot returns every job the pool holds, in any state.
func (p *Pool) snapshot() []*job {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*job, 0, len(p.jobs))
	for _, j := range p.jobs {
		out = append(out, j)
	}
	return out
}
