package engine

import (
	"context"
	"time"
)

// Batch routes (handlers.Policy.Batch): the books gather a route's queued
// rows into batches, each handed to one executor goroutine
// (executor.executeBatch), every row of it counted as running against the
// route's concurrency. Each row keeps its own lease, renewal, start mark,
// fence and outcome, exactly as a row run alone.
//
// What a batch takes, from the front of the route's queue:
//
//   - at most Batch.MaxRows rows, Batch.MaxBytes bytes (a bigger row goes
//     alone) and the route's free concurrency;
//   - on an ordered route, at most the head of each key: a key's next row
//     waits behind its head (job.next, jobWaiting) outside the queue until
//     the head ended, as on every ordered route, so that the batch after
//     holds it;
//   - never a suspect (job.suspect) or a row on its last attempt among
//     others: these run alone (isolated), so that a row that keeps failing
//     its batches, or kills its worker, goes dead alone and never takes
//     its batch-mates with it.
//
// A batch that is not full waits for more rows at most Batch.MaxWait from
// when its oldest row joined the queue (the route's batchTimer dispatches
// it then).

// dispatchBatchLocked is dispatchLocked for a batch route: it starts
// batches of rs's queued jobs while the route has room, unless the pool
// is stopping. It returns the jobs whose leases are at risk.
func (b *books) dispatchBatchLocked(rs *routeState) (atRisk []*job) {
	bp := rs.policy.Batch
	for !b.stopping && rs.running < rs.limit && len(rs.queue) > 0 {
		now := b.clock.Now()
		atRisk = append(atRisk, b.dropUnrunnableLocked(rs, now)...)
		if len(rs.queue) == 0 {
			break
		}
		head := rs.queue[0]
		var batch []*job
		if rs.isolated(head) {
			if head.suspect && b.suspectRunning {
				break // it waits for the suspect that runs (see job.suspect)
			}
			batch = []*job{head}
		} else {
			room := min(rs.limit-rs.running, bp.MaxRows)
			var bytes int64
			full := false
			oldest := head.queuedAt
			for _, j := range rs.queue {
				if len(batch) == room {
					full = len(batch) == bp.MaxRows
					break
				}
				if rs.isolated(j) {
					continue // it runs alone, in a batch of its own
				}
				if bp.MaxBytes > 0 && len(batch) > 0 && bytes+j.size > bp.MaxBytes {
					full = true
					break
				}
				batch = append(batch, j)
				bytes += j.size
				if j.queuedAt.Before(oldest) {
					oldest = j.queuedAt
				}
			}
			full = full || len(batch) == bp.MaxRows
			if !full && bp.MaxWait > 0 {
				if wait := bp.MaxWait - now.Sub(oldest); wait > 0 {
					rs.armBatchTimer(wait, b.dispatchLater)
					break
				}
			}
		}
		for _, j := range batch {
			j.runAt = now
			b.moveLocked(j, jobRunning, false)
			b.suspectRunning = b.suspectRunning || j.suspect
		}
		// The policy is read under the lock: a reload may change it.
		b.run.run(execTask{batch: batch, policy: rs.policy})
	}
	b.premarkLocked(rs)
	return atRisk
}

// isolated reports whether j runs in a batch of its own on rs: a suspect,
// or a row on its last attempt (of at least two).
func (rs *routeState) isolated(j *job) bool {
	return j.suspect || (rs.policy.MaxAttempts > 1 && j.row.Attempts >= rs.policy.MaxAttempts)
}

// dropUnrunnableLocked takes out of rs's queue the jobs that may not
// start: fenced while waiting (no outcome to write), or with too little
// lease left (given back, returned as at risk), each with the rows of its
// key's chain behind it, as dispatchLocked does for the head of a
// route's queue.
func (b *books) dropUnrunnableLocked(rs *routeState, now time.Time) (atRisk []*job) {
	var lost, risky []*job
	for _, j := range rs.queue {
		switch {
		case context.Cause(j.ctx) == errLeaseLost:
			lost = append(lost, j)
		case now.Add(b.startMargin).After(j.leaseUntil):
			risky = append(risky, j)
		}
	}
	for _, j := range lost {
		b.moveLocked(j, jobDone, false)
		b.forgetLocked(j)
		atRisk = append(atRisk, b.cutChainLocked(j)...)
	}
	for _, j := range risky {
		b.moveLocked(j, jobDone, false)
		atRisk = append(atRisk, j)
		atRisk = append(atRisk, b.cutChainLocked(j)...)
	}
	return atRisk
}

// armBatchTimer has rs's waiting batch dispatched by dispatch after
// wait, unless a timer is already set. The books' lock must be held.
func (rs *routeState) armBatchTimer(wait time.Duration, dispatch func(*routeState)) {
	if rs.batchTimer != nil {
		return
	}
	rs.batchTimer = time.AfterFunc(wait, func() { dispatch(rs) })
}

// dispatchLater dispatches rs once its batch timer fired.
func (b *books) dispatchLater(rs *routeState) {
	b.mu.Lock()
	rs.batchTimer = nil
	atRisk := b.dispatchLocked(rs)
	b.mu.Unlock()
	if len(atRisk) > 0 {
		b.give.atRisk(atRisk)
	}
}

// batchReturned is handlerReturned and follow for every job of a batch at
// once, so that the route's room and its keys' next rows are dispatched
// once, into full batches, rather than row by row: each job's slot and
// bytes are freed; the next row of each job's key joins the front of its
// route's queue when the job ended so that its key may go on (proceed[i])
// and goes back unstarted otherwise. chained[i] reports whether a row of
// jobs[i]'s key waited behind it (result.chained).
func (b *books) batchReturned(jobs []*job, proceed []bool) (chained []bool) {
	chained = make([]bool, len(jobs))
	touched := make(map[*routeState]bool, 1)
	var atRisk, cut []*job
	b.mu.Lock()
	now := b.clock.Now()
	suspect := false
	for _, j := range jobs {
		if j.state != jobRunning {
			continue
		}
		j.doneAt = now
		j.route.returned++
		j.route.ranFor(now.Sub(j.runAt))
		b.moveLocked(j, jobDone, false)
		touched[j.route] = true
		suspect = suspect || j.suspect
	}
	for i, j := range jobs {
		n := j.next
		if n == nil {
			continue
		}
		chained[i] = true
		if proceed[i] && !b.stopping && n.state == jobWaiting && context.Cause(j.ctx) != errLeaseLost {
			j.next = nil
			b.moveLocked(n, jobQueued, true)
			touched[n.route] = true
		} else {
			cut = append(cut, b.cutChainLocked(j)...)
		}
	}
	if suspect {
		// The next suspect, whatever its route, may go.
		b.suspectRunning = false
		for _, rs := range b.routes.byKey {
			touched[rs] = true
		}
	}
	for rs := range touched {
		atRisk = append(atRisk, b.dispatchLocked(rs)...)
	}
	b.mu.Unlock()
	for _, j := range jobs {
		j.row.Payload, j.row.Key = nil, nil // the handler is done with them
	}
	if len(atRisk) > 0 {
		b.give.atRisk(atRisk)
	}
	if len(cut) > 0 {
		b.give.giveBack(cut, "released unstarted: the row before it in its key did not finish")
	}
	signal(b.freed)
	return chained
}
