package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/clock"
)

// books are the pool's records of the rows it holds, and the one lock that
// guards them: every claimed (or handed-off) row's job until its outcome is
// written, the routes with their queues and counts (routeTable), the bytes
// held against Config.ClaimBytes, the start bits of the claims on the
// books, and the hand-off's reservations. Every job state change goes
// through moveLocked, which keeps the route counts, the bytes held and the
// gauges.
//
// The books start jobs and give rows back through the components above
// them, which the pool wires in (run, marks, give): they never reach for
// the pool.
type books struct {
	mu        sync.Mutex
	jobs      map[int64]*job // every claimed row until its outcome is written
	routes    *routeTable    // by route ("" for the default route)
	heldBytes int64          // bytes (payloads, keys, headers) of queued and running jobs
	stopping  bool           // no handler starts any more

	// claims holds the start bits of the claims whose rows are on the
	// books, by lease token (start.go).
	claims map[int64]*claimStarts
	// reservations is the room taken by the rows being inserted by ingest
	// for this pool's handlers, by lease token (handoff.go); accepting is
	// true while the pool takes such rows (from its start until it stops).
	reservations map[int64]*reservation
	accepting    bool
	// claimingBytes is the byte budget of the claim in flight
	// (claimer.claim), which the hand-off leaves alone.
	claimingBytes int64
	// suspectRunning: a suspect's handler runs (job.suspect); the next one
	// waits for it.
	suspectRunning bool

	// freed is signalled when a claimed row is done with, making room for
	// another (the claim loop waits on it).
	freed chan struct{}

	// ahead is premarkLocked's list of the marks it writes ahead, its
	// backing array reused (queueAhead copies the marks): one per
	// dispatch would be an allocation per handler's return.
	ahead []*startMark

	startMargin time.Duration // the lease a row needs left to start (settings.startMargin)
	metrics     *metrics
	clock       *clock.Clock

	// Set by the pool when it wires its components.
	run   runner    // starts a dispatched job's handler: the executor
	marks markQueue // the start marks written ahead, and the claims done: the leaser
	give  giver     // gives rows back unattempted: the pool's releaser
}

// runner starts the handler of a job the books dispatched (the executor).
type runner interface {
	// run hands t over; the books' lock is held: it never blocks.
	run(t execTask)
}

// markQueue takes the start marks the books write ahead, and the claims
// whose jobs all left the books (the leaser's mark writers).
type markQueue interface {
	// queueAhead queues marks written ahead of their rows' starts; the
	// books' lock is held. It must not keep marks, whose backing array
	// the books reuse.
	queueAhead(marks []*startMark)
	// claimDone says that the starts row of the claim token is to be
	// deleted; the books' lock is held.
	claimDone(token int64)
}

// giver gives rows back to the inbox unattempted (the releaser), once the
// books' lock is released.
type giver interface {
	// atRisk gives back jobs whose leases could not be renewed in time.
	atRisk(jobs []*job)
	// giveBack gives back jobs, with why in their last_error.
	giveBack(jobs []*job, why string)
}

// newBooks returns empty books for a pool built from a.
func newBooks(a archetype) *books {
	b := &books{
		jobs:         make(map[int64]*job),
		claims:       make(map[int64]*claimStarts),
		reservations: make(map[int64]*reservation),
		freed:        make(chan struct{}, 1),
		startMargin:  a.cfg.startMargin(),
		metrics:      a.metrics,
		clock:        a.clock,
	}
	b.routes = newRouteTable(&b.mu, a)
	return b
}

// track adds claimed jobs to the books and their routes' queues, in claim
// order, and starts what may start.
func (b *books) track(jobs []*job) {
	b.mu.Lock()
	releases := b.trackLocked(jobs)
	b.mu.Unlock()
	if len(releases) > 0 {
		b.give.atRisk(releases)
	}
}

// trackLocked is track under the lock; it returns the jobs whose leases
// are at risk, to be given back once the lock is released.
func (b *books) trackLocked(jobs []*job) (releases []*job) {
	touched := make(map[*routeState]bool)
	now := b.clock.Now()
	for _, j := range jobs {
		if c := b.claims[j.token]; c != nil {
			c.held++
		} else {
			b.claims[j.token] = &claimStarts{held: 1}
		}
		j.route = b.routes.forLocked(j.row.EventType)
		j.route.lastRows = now
		// A chain's follower waits for the row before it, claimed by the
		// same statement (so already on the books).
		if pred, ok := b.jobs[j.row.Pred]; ok && j.row.Pred != 0 && pred.token == j.token && pred.next == nil {
			pred.next = j
			b.moveLocked(j, jobWaiting, false)
		} else {
			b.moveLocked(j, jobQueued, false)
		}
		b.jobs[j.row.ID] = j
		touched[j.route] = true
	}
	for rs := range touched {
		releases = append(releases, b.dispatchLocked(rs)...)
	}
	return releases
}

// dispatchLocked starts handlers for rs's queued jobs while the route has
// room, unless the pool is stopping. It returns the jobs whose leases are
// at risk, to be given back by the caller once the lock is released.
func (b *books) dispatchLocked(rs *routeState) (atRisk []*job) {
	if rs.policy.Batch.MaxRows > 0 {
		return b.dispatchBatchLocked(rs)
	}
	for !b.stopping && rs.running < rs.limit && len(rs.queue) > 0 {
		j := rs.queue[0]
		if j.suspect && b.suspectRunning && context.Cause(j.ctx) != errLeaseLost {
			break // it waits for the suspect that runs (see job.suspect)
		}
		if context.Cause(j.ctx) == errLeaseLost {
			// Fenced while waiting: the row is someone else's; no outcome
			// to write. The rows of its key's chain behind it go back (their
			// leases, renewed with it, are at risk or lost too).
			b.moveLocked(j, jobDone, false)
			b.forgetLocked(j)
			atRisk = append(atRisk, b.cutChainLocked(j)...)
			continue
		}
		if b.clock.Now().Add(b.startMargin).After(j.leaseUntil) {
			// Healthy renewals keep at least half a lease ahead; this one has
			// not been renewed for a while. Running it now could overlap with
			// a rescuer's claim, so the row goes back instead, and so do the
			// rows of its key's chain behind it.
			b.moveLocked(j, jobDone, false)
			atRisk = append(atRisk, j)
			atRisk = append(atRisk, b.cutChainLocked(j)...)
			continue
		}
		// Its bytes stay held until the handler returns. Its executor
		// marks it started first, unless the claim did (see start.go).
		j.runAt = b.clock.Now()
		b.moveLocked(j, jobRunning, false)
		b.suspectRunning = b.suspectRunning || j.suspect
		// The policy is read under the lock: a reload may change it.
		b.run.run(execTask{j: j, policy: rs.policy})
	}
	b.premarkLocked(rs)
	return atRisk
}

// premarkLocked writes ahead the start marks of rs's queued rows expected
// to start within premarkHorizon (start.go). Suspects and chain followers
// are marked as they start: their marks also unmark other rows.
func (b *books) premarkLocked(rs *routeState) {
	n := min(len(rs.queue), int(rs.rate*premarkHorizon.Seconds()))
	ahead := b.ahead[:0]
	for _, j := range rs.queue[:n] {
		if j.dbStarted || j.premark != nil || j.suspect || j.row.Pred != 0 {
			continue
		}
		j.premark = &startMark{j: j, done: make(chan startOutcome, 1), ahead: true}
		ahead = append(ahead, j.premark)
	}
	if len(ahead) > 0 {
		b.marks.queueAhead(ahead)
		clear(ahead) // the marks are the leaser's now
	}
	b.ahead = ahead[:0]
}

// cutChainLocked takes the rows of j's key chain that wait behind j off the
// books' queues and returns them, marked done: they are to be given back
// unstarted.
func (b *books) cutChainLocked(j *job) []*job {
	var cut []*job
	for n := j.next; n != nil && n.state == jobWaiting; n = n.next {
		b.moveLocked(n, jobDone, false)
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
func (b *books) follow(j *job, waits, proceed bool) (chained bool) {
	if !waits {
		return false // most rows have no chain: no second lock for it
	}
	b.mu.Lock()
	n := j.next
	if n == nil {
		b.mu.Unlock()
		return false
	}
	var atRisk, cut []*job
	if proceed && !b.stopping && n.state == jobWaiting && context.Cause(j.ctx) != errLeaseLost {
		j.next = nil
		b.moveLocked(n, jobQueued, true)
		atRisk = b.dispatchLocked(n.route)
	} else {
		cut = b.cutChainLocked(j)
	}
	b.mu.Unlock()
	if len(atRisk) > 0 {
		b.give.atRisk(atRisk)
	}
	if len(cut) > 0 {
		b.give.giveBack(cut, "released unstarted: the row before it in its key did not finish")
	}
	return true
}

// chained reports whether the next row of j's key waits behind j in this
// worker: j's completion then need not unpark it (follow runs it, or gives
// it back due).
func (b *books) chained(j *job) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return j.next != nil
}

// handlerReturned marks j's handler finished: its slot and bytes are free
// (the route may start its next row), its lease is kept until the outcome
// is written. It reports whether a row of j's key waits behind j, for
// follow: j.next is read under the lock here, and after j is done only
// j's own executor (follow) changes it.
func (b *books) handlerReturned(j *job) (waits bool) {
	b.mu.Lock()
	var releases []*job
	if j.state == jobRunning {
		j.doneAt = b.clock.Now()
		j.route.returned++
		j.route.ranFor(j.doneAt.Sub(j.runAt))
		b.moveLocked(j, jobDone, false)
		releases = b.dispatchLocked(j.route)
		if j.suspect {
			// The next suspect, whatever its route, may go.
			b.suspectRunning = false
			for _, rs := range b.routes.byKey {
				releases = append(releases, b.dispatchLocked(rs)...)
			}
		}
	}
	waits = j.next != nil
	b.mu.Unlock()
	j.row.Payload, j.row.Key = nil, nil // the handler is done with them
	if len(releases) > 0 {
		b.give.atRisk(releases)
	}
	signal(b.freed)
	return waits
}

// syncRoutes makes the routes follow reg (a reload) and dispatches every
// route (their room may have grown); it gives back what is at risk.
func (b *books) syncRoutes(reg *handlers.Registry) {
	b.mu.Lock()
	b.routes.syncLocked(reg, b.jobs)
	var releases []*job
	for _, rs := range b.routes.byKey {
		releases = append(releases, b.dispatchLocked(rs)...)
	}
	b.mu.Unlock()
	if len(releases) > 0 {
		b.give.atRisk(releases)
	}
}

// abandon marks a queued or running job done without an outcome from its
// handler (shutdown releases it); it reports whether the job was still
// queued or running. A handler that returns later finds it done.
func (b *books) abandon(j *job) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch j.state {
	case jobQueued, jobRunning, jobWaiting:
		b.moveLocked(j, jobDone, false)
		return true
	}
	return false
}

// accept has the books take the rows the hand-off at ingest delivers,
// from the pool's start on (handoff.go).
func (b *books) accept() {
	b.mu.Lock()
	b.accepting = true
	b.mu.Unlock()
}

// stopQueued stops handlers from starting and returns the jobs still
// waiting for one: queued in their routes, or behind the row before them
// in their key's chain.
func (b *books) stopQueued() []*job {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopping = true
	var queued []*job
	for _, rs := range b.routes.byKey {
		queued = append(queued, rs.queue...)
	}
	for _, j := range b.jobs {
		if j.state == jobWaiting {
			queued = append(queued, j)
		}
	}
	return queued
}

// forget removes j from the books once its outcome is written or fenced.
func (b *books) forget(j *job) {
	if j == nil {
		return
	}
	b.mu.Lock()
	b.forgetLocked(j)
	b.mu.Unlock()
	signal(b.freed)
}

// forgetResults removes the jobs of a batch of outcomes from the books,
// once written (or given up on).
func (b *books) forgetResults(batch []result) {
	b.mu.Lock()
	for _, r := range batch {
		b.forgetLocked(r.job)
	}
	b.mu.Unlock()
	signal(b.freed)
}

// forgetLocked is forget without the signal.
func (b *books) forgetLocked(j *job) {
	if j == nil {
		return
	}
	if cur, ok := b.jobs[j.row.ID]; ok && cur == j {
		delete(b.jobs, j.row.ID)
		b.claimDoneLocked(j)
	}
}

// claimDoneLocked settles j's claim once j leaves the books: when the
// claim's last job goes, its starts row is deleted by the next mark
// statement.
func (b *books) claimDoneLocked(j *job) {
	c := b.claims[j.token]
	if c == nil {
		return
	}
	if c.held--; c.held > 0 {
		return
	}
	delete(b.claims, j.token)
	if c.written {
		b.marks.claimDone(j.token)
	}
}

// moveLocked is the one transition of a job's state, from j.state to to,
// and the one place that keeps the books with it: j's route's queue
// (leaving jobQueued takes j out of it; entering it puts j at the back, or
// at the front when front), the route's running and waiting counts, the
// bytes held (those of queued, waiting and running jobs, against
// ClaimBytes), and the gauges. The pool's queued and running counts are
// derived from the routes' (countsLocked).
func (b *books) moveLocked(j *job, to jobState, front bool) {
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
		if rs.policy.Batch.MaxRows > 0 {
			j.queuedAt = b.clock.Now()
		}
	case jobRunning:
		rs.running++
	case jobWaiting:
		rs.waiting++
	}
	if holds(from) != holds(to) {
		if holds(to) {
			b.heldBytes += j.size
		} else {
			b.heldBytes -= j.size
		}
	}
	j.state = to
	b.routes.gaugesLocked(rs)
	b.updateGaugesLocked()
}

// outcomesBehindLocked is how many jobs wait for their outcomes to be
// written (their handlers returned).
func (b *books) outcomesBehindLocked() int {
	queued, running := b.routes.countsLocked()
	return len(b.jobs) - queued - running
}

func (b *books) updateGaugesLocked() {
	queued, running := b.routes.countsLocked()
	b.metrics.inflight.Set(float64(queued + running))
	b.metrics.heldBytes.Set(float64(b.heldBytes))
}

// load reports the rows held (queued and running) and the handlers
// running, across routes.
func (b *books) load() (held, running int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	queued, running := b.routes.countsLocked()
	return queued + running, running
}

// snapshot returns every job the books hold, in any state.
func (b *books) snapshot() []*job {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*job, 0, len(b.jobs))
	for _, j := range b.jobs {
		out = append(out, j)
	}
	return out
}
