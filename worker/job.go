package worker

import (
	"context"
	"time"
)

// jobState is where a claimed row is in this worker.
type jobState uint8

const (
	// jobQueued: claimed, waiting in the prefetch queue for a handler.
	jobQueued jobState = iota
	// jobRunning: its handler runs.
	jobRunning
	// jobDone: its handler returned (or it was released without running);
	// its outcome waits to be written. The lease is still renewed, so a
	// database stall on completions cannot hand a finished row to another
	// worker.
	jobDone
)

// job is one claimed row, from its claim until its outcome is written (or
// found fenced). The fields after the comment are guarded by Pool.mu.
type job struct {
	ctx    context.Context // the handler's; cancelled on lease loss or shutdown
	cancel context.CancelCauseFunc
	row    claimedRow
	token  int64
	size   int64 // payload and key bytes, counted against ClaimBytes until the handler returns

	// Guarded by Pool.mu.
	state      jobState
	ran        bool      // its handler started
	dbStarted  bool      // the database knows it started (claim or renewal said so)
	leaseUntil time.Time // when the lease ends at the latest, by the local clock
	doneAt     time.Time // when the handler returned; outcome-write delay starts here
}

// beginAction says what an executor does with a job it dequeued.
type beginAction uint8

const (
	// beginRun: run the handler.
	beginRun beginAction = iota
	// beginSkip: not this executor's (released at shutdown, or its lease was
	// lost while it waited: the row is another worker's now).
	beginSkip
	// beginRelease: the lease is at risk (renewals are failing): give the
	// row back unattempted instead of running it.
	beginRelease
)

// track adds claimed jobs to the pool's books.
func (p *Pool) track(jobs []*job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, j := range jobs {
		p.jobs[j.row.ID] = j
		p.queued++
		p.heldBytes += j.size
	}
	p.metrics.inflight.Set(float64(p.queued + p.running))
	p.metrics.heldBytes.Set(float64(p.heldBytes))
}

// begin moves a dequeued job to running, unless it must not run.
func (p *Pool) begin(j *job) beginAction {
	p.mu.Lock()
	defer p.mu.Unlock()
	if j.state != jobQueued {
		return beginSkip
	}
	if context.Cause(j.ctx) == errLeaseLost {
		// Fenced while waiting: the row is someone else's; no outcome to write.
		p.dropLocked(j)
		p.updateGaugesLocked()
		return beginSkip
	}
	action := beginRun
	if p.cfg.Now().Add(p.cfg.Lease / 3).After(j.leaseUntil) {
		// Healthy renewals keep at least half a lease ahead; this one has
		// not been renewed for a while. Running it now could overlap with a
		// rescuer's claim, so the row goes back instead.
		action = beginRelease
	}
	p.queued--
	if action == beginRun {
		// Its bytes stay held until the handler returns.
		j.state, j.ran = jobRunning, true
		p.running++
	} else {
		j.state = jobDone
		p.heldBytes -= j.size
	}
	p.updateGaugesLocked()
	return action
}

// handlerReturned marks j's handler finished: its slot and bytes are free,
// its lease is kept until the outcome is written.
func (p *Pool) handlerReturned(j *job) {
	p.mu.Lock()
	if j.state == jobRunning {
		j.state = jobDone
		j.doneAt = p.cfg.Now()
		p.running--
		p.heldBytes -= j.size
	}
	p.updateGaugesLocked()
	p.mu.Unlock()
	j.row.Payload, j.row.Key = nil, nil // the handler is done with them
	signal(p.freed)
}

// abandon marks a queued or running job done without an outcome from its
// handler (shutdown releases it); it reports whether the job was still
// queued or running. A handler that returns later finds it done.
func (p *Pool) abandon(j *job) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch j.state {
	case jobQueued:
		p.queued--
	case jobRunning:
		p.running--
	default:
		return false
	}
	j.state = jobDone
	p.heldBytes -= j.size
	p.updateGaugesLocked()
	return true
}

// forget removes j from the books once its outcome is written or fenced.
func (p *Pool) forget(j *job) {
	if j == nil {
		return
	}
	p.mu.Lock()
	p.dropLocked(j)
	p.updateGaugesLocked()
	p.mu.Unlock()
	signal(p.freed)
}

// dropLocked removes j from the books whatever its state.
func (p *Pool) dropLocked(j *job) {
	if cur, ok := p.jobs[j.row.ID]; !ok || cur != j {
		return
	}
	delete(p.jobs, j.row.ID)
	switch j.state {
	case jobQueued:
		p.queued--
		p.heldBytes -= j.size
	case jobRunning:
		p.running--
		p.heldBytes -= j.size
	}
	j.state = jobDone
}

func (p *Pool) updateGaugesLocked() {
	p.metrics.inflight.Set(float64(p.queued + p.running))
	p.metrics.heldBytes.Set(float64(p.heldBytes))
}

// load reports the rows held (queued and running), the handlers running and
// the bytes held.
func (p *Pool) load() (held, running int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queued + p.running, p.running, p.heldBytes
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
