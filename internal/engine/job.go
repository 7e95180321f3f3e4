package engine

import (
	"context"
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
// found fenced). The fields after the comment are guarded by the books'
// lock; its state changes only through books.moveLocked.
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

	// Guarded by the books' lock.
	state       jobState
	dbStarted   bool       // the database knows its handler starts (the claim or a start mark said so)
	claimMarked bool       // its claim marked it started (inbox.started); unmarking it is a write of its row
	premark     *startMark // its start mark, written ahead while it waits near the front of its route's queue (see premarkLocked)
	leaseUntil  time.Time  // when the lease ends at the latest, by the local clock
	runAt       time.Time  // when its handler was dispatched
	queuedAt    time.Time  // when it last joined a batch route's queue (batch.go); zero on other routes
	doneAt      time.Time  // when the handler returned; outcome-write delay starts here
	stuckAfter  time.Time  // when a running handler counts as stuck: its route's timeout + stuckGrace (zero: no timeout)
	stuck       bool       // found stuck: its lease is no longer renewed
	next        *job       // the next row of its key's chain, waiting for this one (jobWaiting); see follow
}

// holds reports whether a job in state s holds its bytes and a place in
// its route: from its claim until its handler returns (or it is given
// back).
func holds(s jobState) bool { return s == jobQueued || s == jobWaiting || s == jobRunning }
