package engine

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/internal/startstop"
)

// maxCompleteBatch caps the rows written by one completion statement.
const maxCompleteBatch = 1000

// numCompleters is how many completion statements may run at once: while
// one waits on its commit, the next batch gathers and goes.
const numCompleters = 2

// completeLinger is how long a batch of outcomes stays open for more to
// join it after its first one arrived. Every statement has a fixed cost (a
// round trip, a commit); with fast handlers outcomes arrive one claim's
// worth at a time, and waiting a few milliseconds lets one statement write
// several claims' worth. A row's final state is written at most this much
// later; its handler's slot is already free, so claiming does not wait.
//
// The time from a handler's success to its outcome's commit is the window
// in which a crash re-runs a handler that already succeeded: the outcome-
// write delay histogram measures it.
const completeLinger = 5 * time.Millisecond

// completer writes the jobs' outcomes (results) in batches, fenced by
// their lease tokens, with numCompleters statements at most in flight. It
// is a service (internal/startstop): Start launches its goroutines on the hard shutdown
// deadline's context (until then final states are written, even after
// shutdown began), Stop closes the results and returns once every one was
// written or given up on.
type completer struct {
	startstop.Base
	archetype
	b    *books        // the jobs leave the books once written
	db   *pgxpool.Pool // the engine's statements
	wake func()        // rows may be due: the claim loop looks
	// results carries outcomes to the completers; mu guards its closing
	// against late senders (handlers that ignored cancellation).
	results chan result
	mu      sync.RWMutex
	closed  bool
}

// newCompleter returns a completer of b's jobs on db, with room for
// cfg.maxCapacity outcomes waiting, that calls wake when the rows behind
// finished ones may be due.
func newCompleter(a archetype, b *books, db *pgxpool.Pool, wake func()) *completer {
	return &completer{archetype: a, b: b, db: db, wake: wake, results: make(chan result, a.cfg.maxCapacity())}
}

// Start launches the completion goroutines; they write until Stop, giving
// up on writes once stop (the hard shutdown deadline) ends, when the
// results close as at Stop.
func (c *completer) Start(stop context.Context) error {
	return c.StartWith(stop, func(ctx context.Context) error {
		for range numCompleters {
			// Writes are bounded by stop itself, not by ctx, which Stop
			// ends before the last outcomes are written.
			c.Go(func() { c.loop(stop) })
		}
		c.Go(func() { <-ctx.Done(); c.closeResults() })
		return nil
	})
}

// Stop closes the results (later ones are dropped: their rows return when
// their leases expire) and waits until those submitted were written.
func (c *completer) Stop() {
	c.closeResults()
	c.Base.Stop()
}

// closeResults closes the results: outcomes submitted later are dropped.
func (c *completer) closeResults() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.results)
	}
	c.mu.Unlock()
}

// submit hands r to the completion goroutines. After Stop it drops r: the
// row's lease expires and the rescuer returns it.
func (c *completer) submit(r result) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		c.b.forget(r.job)
		return
	}
	c.results <- r
}

// trySubmit is submit unless it would wait for room in the results: it
// reports whether r was taken (submitted, or dropped after Stop).
func (c *completer) trySubmit(r result) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		c.b.forget(r.job)
		return true
	}
	select {
	case c.results <- r:
		return true
	default:
		return false
	}
}

// loop writes outcomes in batches until the results channel is closed
// and drained.
func (c *completer) loop(stop context.Context) {
	batch := make([]result, 0, maxCompleteBatch)
	linger := time.NewTimer(completeLinger)
	linger.Stop()
	for first := range c.results {
		batch = append(batch[:0], first)
		linger.Reset(completeLinger)
	gather:
		for len(batch) < maxCompleteBatch {
			// What waits already is taken without the two-way select (a
			// receive that does not block is far cheaper, and this runs per
			// row); the select only when the channel is empty.
			select {
			case r, ok := <-c.results:
				if !ok {
					break gather
				}
				batch = append(batch, r)
				continue
			default:
			}
			select {
			case r, ok := <-c.results:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			case <-linger.C:
				break gather
			}
		}
		linger.Stop()
		c.flush(stop, batch)
	}
}

// flush writes one batch, retrying on database errors with backoff until
// it succeeds or stop ends. Meanwhile the rows keep their leases (renewal
// goes on for every job until it is forgotten), so a stall shorter than the
// renewals' own failure cannot hand a finished row to another worker. If
// stop ends first, the rows' leases expire and the rescuer returns them
// (at-least-once, never lost).
func (c *completer) flush(stop context.Context, batch []result) {
	retry := backoff.NewRetrier(backoff.Exponential{Base: 50 * time.Millisecond, Max: 5 * time.Second})
	var written []int64
	for {
		var err error
		written, err = c.writeOutcomes(stop, batch)
		if err == nil {
			break
		}
		c.metrics.dbErrors.WithLabelValues("complete").Inc()
		if stop.Err() != nil {
			c.log.Error().Err(err).Int("rows", len(batch)).
				Msg("shutdown deadline reached with outcomes unwritten; these rows return when their leases expire")
			for _, r := range batch {
				c.b.forget(r.job)
			}
			return
		}
		delay := retry.Failed()
		c.log.Error().Err(err).Int("rows", len(batch)).Int("attempt", retry.Failures()).Dur("retry_in", delay).
			Msg("writing outcomes failed; retrying, leases are kept meanwhile")
		backoff.Sleep(stop, delay)
	}

	now := c.clock.Now()
	c.tally(batch, written, now)
	c.b.forgetResults(batch)
	for _, r := range batch {
		// doneAt was written before the result was submitted, and is not
		// written again: it is read without the books' lock, which every handler's
		// start and end takes.
		if r.job != nil && !r.job.doneAt.IsZero() {
			c.metrics.outcomeWriteDelay.Observe(now.Sub(r.job.doneAt).Seconds())
		}
		if _, ok := slices.BinarySearch(written, r.id); !ok {
			c.metrics.fenced.Inc()
			rowLog(&c.log, zerolog.WarnLevel, r).Str("outcome", r.outcome).
				Msg("fenced: lease lost before completion, outcome not applied")
			continue
		}
		applied(c.metrics, &c.log, r)
	}
}

// applied counts and logs r, an outcome written.
func applied(m *metrics, log *zerolog.Logger, r result) {
	label := r.typeLabel
	if label == "" {
		label = otherEventTypes
	}
	m.completedCounter(r.outcome, label).Inc()
	switch r.outcome {
	case outcomeProcessed:
		rowLog(log, zerolog.DebugLevel, r).Msg("processed")
	case outcomeRetried:
		rowLog(log, zerolog.WarnLevel, r).Dur("retry_in", r.delay).Msg("attempt failed, will retry")
	case outcomeDead:
		rowLog(log, zerolog.ErrorLevel, r).Msg("dead")
	case outcomeReleased:
		rowLog(log, zerolog.InfoLevel, r).Msg("released")
	}
}

// completion is r as the completion statement writes it.
func (r result) completion() driver.Completion {
	return driver.Completion{ID: r.id, Token: r.token, Status: r.status, Delay: r.delay,
		Error: r.lastError, Release: r.release, Chained: r.chained}
}

// writeOutcomes runs the fenced batch completion and returns the ids it
// applied, sorted. Released rows are announced so other workers take them
// at once.
func (c *completer) writeOutcomes(ctx context.Context, batch []result) ([]int64, error) {
	completions := make([]driver.Completion, len(batch))
	released := false
	for i, r := range batch {
		completions[i] = r.completion()
		released = released || r.release
	}
	// Sorted by id: the statement then locks the rows in id order (see
	// sql/complete.sql). The completions, not the results (twice their
	// size); mostly in order already, as outcomes arrive about in claim
	// order.
	byID := func(a, b driver.Completion) int { return cmp.Compare(a.ID, b.ID) }
	if !slices.IsSortedFunc(completions, byID) {
		slices.SortFunc(completions, byID)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StatementTimeout)
	defer cancel()
	ordered, blocking := c.b.routes.OrderedTypes()
	got, err := driver.CompleteRecorded(ctx, c.db, completions, driver.Ordering{OrderedTypes: ordered, BlockingTypes: blocking},
		c.historyOf(batch, c.clock.Now()))
	if err != nil {
		return nil, err
	}
	// RETURNING gives no order; nearly sorted already, as the update
	// follows the ids it was given.
	slices.Sort(got)
	if len(ordered) > 0 {
		c.wake() // the next rows of finished keys were unparked
	}
	if released {
		if err := driver.Notify(ctx, c.db); err != nil {
			c.log.Warn().Err(err).Msg("notify after release failed; other workers will poll")
		}
	}
	return got, nil
}

// historyOf is what the completion of batch writes to the rows'
// histories (migration 017), in its own statement: the attempts kept
// (keptAttempt), finished at now when their end is unknown. A batch of
// first-attempt successes, the happy path, keeps none, and its completion
// runs the statement without the history's part. None with
// WithoutHistory.
func (a archetype) historyOf(batch []result, now time.Time) driver.Recorded {
	h := driver.Recorded{Worker: a.cfg.ID}
	if a.cfg.noHistory {
		return h
	}
	for _, r := range batch {
		if r.job == nil || r.release || !keptAttempt(r.outcome, r.attempt) {
			continue
		}
		at := driver.Attempt{RowID: r.id, Attempt: r.attempt, StartedAt: r.job.runAt, FinishedAt: r.job.doneAt, Outcome: r.outcome}
		if at.FinishedAt.IsZero() {
			at.FinishedAt = now
		}
		if at.StartedAt.IsZero() {
			at.StartedAt = at.FinishedAt
		}
		if r.lastError != nil {
			at.Error = *r.lastError
		}
		h.Attempts = append(h.Attempts, at)
	}
	return h
}

// keptAttempt reports whether a row's history keeps attempt number n
// whose outcome was outcome: a failed attempt (retried or dead), and the
// end of a row that failed before (processed at an attempt after the
// first). A row processed at its first attempt keeps nothing: its one
// attempt is the row itself (received_at, processed_at).
func keptAttempt(outcome string, n int) bool {
	return n > 0 && (outcome != outcomeProcessed || n > 1)
}

// tally counts the written outcomes of batch for the per-route rollup
// (tallyResults).
func (c *completer) tally(batch []result, written []int64, now time.Time) {
	applied := make([]result, 0, len(batch))
	for _, r := range batch {
		if _, ok := slices.BinarySearch(written, r.id); ok {
			applied = append(applied, r)
		}
	}
	tallyResults(c.metrics, now, applied)
}

// tallyResults counts outcomes written at now for the per-route rollup
// (maintenance.Tally), under one lock; released rows are no outcome.
func tallyResults(m *metrics, now time.Time, rs []result) {
	outcomes := make([]maintenance.Outcome, 0, len(rs))
	for _, r := range rs {
		if r.release || r.outcome == outcomeReleased {
			continue
		}
		o := maintenance.Outcome{Route: r.typeLabel, Processed: r.outcome == outcomeProcessed,
			Retried: r.outcome == outcomeRetried, Dead: r.outcome == outcomeDead}
		if o.Route == "" {
			o.Route = otherEventTypes
		}
		if o.Processed && r.job != nil {
			o.Latency = now.Sub(r.job.row.ReceivedAt)
		}
		outcomes = append(outcomes, o)
	}
	m.maintenance.Tally.Add(now, outcomes...)
}
