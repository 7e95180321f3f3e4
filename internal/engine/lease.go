package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/startstop"
)

// leaser keeps the leases of the rows the pool holds (renewLoop) and
// writes their start marks (markLoop, numMarkWriters of them), on markDB,
// the start marks' own sessions. It is a service (internal/startstop):
// Start launches its
// goroutines, which run until Stop (or ctx's end): at shutdown, after the
// last outcome is written. Marks asked for after that are answered at
// risk.
type leaser struct {
	startstop.Base
	b      *books        // the leases of b's jobs
	db     *pgxpool.Pool // the engine's statements: renewals
	markDB *pgxpool.Pool // start marks; set before Start
	rel    *releaser     // gives rows back unattempted
	archetype
	marks startMarks // rows whose handler waits for the database to know it starts
}

// newLeaser returns the leaser of b's jobs, on db, that gives rows back
// through rel.
func newLeaser(a archetype, b *books, db *pgxpool.Pool, rel *releaser) *leaser {
	return &leaser{archetype: a, b: b, db: db, rel: rel, marks: startMarks{wake: make(chan struct{}, 1)}}
}

// Start launches the renewal loop and the mark writers, which run until
// ctx ends or Stop (which waits for them).
func (l *leaser) Start(ctx context.Context) error {
	return l.StartWith(ctx, func(ctx context.Context) error {
		l.Go(func() { l.renewLoop(ctx) })
		for range numMarkWriters {
			l.Go(func() { l.markLoop(ctx) })
		}
		return nil
	})
}

// renewal is one row in a lease renewal statement.
type renewal struct {
	id    int64
	token int64
}

// stuckGrace is how long a handler may go on after its route's timeout
// ended its context before it counts as stuck (it ignores cancellation):
// its lease is then no longer renewed, the row is rescued, and whatever
// the handler does when it returns at last is fenced.
const stuckGrace = 5 * time.Second

// renewLoop extends the leases of every row the pool holds (waiting,
// running, or finished with the outcome unwritten) once less than
// renewThreshold is left (a third of the lease passed), and cancels handlers whose rows were fenced. (The
// database learns that a handler starts before it does, from the claim or
// a start mark: see start.go.) It runs until ctx ends,
// which is after the last outcome is written at shutdown.
func (l *leaser) renewLoop(ctx context.Context) {
	t := time.NewTicker(l.cfg.renewTick())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := l.renew(ctx); err != nil && ctx.Err() == nil {
				l.metrics.dbErrors.WithLabelValues("renew").Inc()
				l.log.Error().Err(err).Msg("lease renewal failed")
			}
		}
	}
}

// renew renews every lease with less than renewThreshold (two thirds of
// the lease) left,
// except those of handlers stuck past their route's timeout (stuckGrace).
func (l *leaser) renew(ctx context.Context) error {
	sent := l.clock.Now()
	threshold := sent.Add(l.cfg.renewThreshold())
	var due, stuck, cut []*job
	var batch []renewal
	l.b.mu.Lock()
	for _, j := range l.b.jobs {
		if j.state == jobRunning && !j.stuckAfter.IsZero() && sent.After(j.stuckAfter) {
			// It ignores cancellation: its lease lapses, the rescuer
			// returns the row, and its late outcome is fenced.
			// The rows of its key's chain behind it go back unstarted.
			if !j.stuck {
				j.stuck = true
				j.cancel(errLeaseLost)
				stuck = append(stuck, j)
				cut = append(cut, l.b.cutChainLocked(j)...)
			}
			continue
		}
		if j.leaseUntil.Before(threshold) {
			due = append(due, j)
			batch = append(batch, renewal{id: j.row.ID, token: j.token})
		}
	}
	l.b.mu.Unlock()
	for _, j := range stuck {
		l.metrics.stuckHandlers.Inc()
		l.log.Error().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
			Dur("grace", stuckGrace).
			Msg("handler still running after its route's timeout and the grace: it ignores cancellation; " +
				"its lease is no longer renewed and the row will be rescued")
	}
	for _, c := range cut {
		l.rel.release(c, "released unstarted: the row before it in its key is stuck in its handler")
	}
	if len(due) == 0 {
		return nil
	}
	// A renewal that takes longer than a lease is useless; it is not tied
	// to anything shorter, so a slow database still gets its renewals.
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Lease)
	defer cancel()
	states, err := l.renewRows(ctx, batch)
	if err != nil {
		return err
	}

	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	for _, j := range due {
		if cur, ok := l.b.jobs[j.row.ID]; !ok || cur != j {
			continue // outcome written meanwhile
		}
		switch states[j.row.ID] {
		case driver.Renewed:
			j.leaseUntil = sent.Add(l.cfg.Lease)
			l.metrics.renewals.Inc()
		case driver.RenewBusy:
			l.log.Debug().Int64("row_id", j.row.ID).Msg("lease not renewed this time: row locked by another statement")
		case driver.RenewLost:
			if j.state == jobDone {
				continue // its outcome write will be fenced (or has just been applied)
			}
			l.metrics.leaseLost.Inc()
			l.log.Warn().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
				Msg("lease lost: cancelling handler")
			j.cancel(errLeaseLost)
		}
	}
	return nil
}

// renewRows runs one renewal statement and returns what it found for
// each row.
func (l *leaser) renewRows(ctx context.Context, batch []renewal) (map[int64]driver.RenewState, error) {
	leases := make([]driver.Lease, len(batch))
	for i, r := range batch {
		leases[i] = driver.Lease{ID: r.id, Token: r.token}
	}
	return driver.Renew(ctx, l.db, leases, l.cfg.Lease)
}
