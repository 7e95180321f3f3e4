package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// expiredPrefix begins the last_error the rescuer writes on a row whose
// lease expired during a started attempt ("lease expired during attempt 2
// (worker … lost the row)"); the claim's suspects lookup reads it back.
const expiredPrefix = "lease expired during attempt "

// rescueBatch caps the rows one rescue statement returns.
const rescueBatch = 1000

// unparkEvery is how many rescue rounds pass between two unpark sweeps.
const unparkEvery = 10

// rescueLoop periodically returns rows with expired leases, and every few
// rounds unparks ordered rows that wait for nothing any more.
func (p *Pool) rescueLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.RescueInterval)
	defer t.Stop()
	for round := 0; ; round++ {
		if _, err := p.Rescue(ctx); err != nil && ctx.Err() == nil {
			p.metrics.dbErrors.WithLabelValues("rescue").Inc()
			p.log.Error().Err(err).Msg("rescue failed")
		}
		if round%unparkEvery == 0 {
			if n, err := p.Unpark(ctx); err != nil && ctx.Err() == nil {
				p.metrics.dbErrors.WithLabelValues("rescue").Inc()
				p.log.Error().Err(err).Msg("unparking ordered rows failed")
			} else if n > 0 {
				p.log.Info().Int("rows", n).Msg("unparked ordered rows that waited for nothing")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Rescue returns every row whose lease has expired to received (or dead,
// when its attempts are used up) and reports how many rows it moved. A row
// moved to dead on an ordered route whose dead rows do not block (on_dead:
// skip) lets its key go on, as a completion to dead does: the rows parked
// behind it are unparked at once (Unpark), not at the sweeper's next round.
// A row whose attempt had started waits its route's backoff, as a retry
// would: it may be the one whose handler killed its worker. The pool calls
// it every RescueInterval; it is exported for tools and tests.
func (p *Pool) Rescue(ctx context.Context) (int, error) {
	total, skippedDead := 0, false
	defer func() {
		if !skippedDead || ctx.Err() != nil {
			return
		}
		if _, err := p.Unpark(ctx); err != nil {
			p.metrics.dbErrors.WithLabelValues("rescue").Inc()
			p.log.Error().Err(err).Msg("unparking the rows behind rescued dead rows failed; the sweeper unparks them later")
		}
	}()
	for {
		n, sd, err := p.rescueBatch(ctx)
		skippedDead = skippedDead || sd
		total += n
		if err != nil {
			return total, err
		}
		if n > 0 {
			signal(p.wake)
		}
		if n < rescueBatch {
			return total, p.dropOrphanStarts(ctx)
		}
	}
}

// dropOrphanStarts deletes the start bits of claims no worker holds any
// more (sql/starts_orphans.sql): those of workers that died, once their
// rows were rescued (a live worker deletes its own).
func (p *Pool) dropOrphanStarts(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
	defer cancel()
	_, err := driver.DeleteOrphanStarts(qctx, p.db, p.cfg.Lease)
	return err
}

// skipsDead reports whether eventType's route is ordered and lets a key go
// on past a dead row (on_dead: skip).
func (p *Pool) skipsDead(eventType string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	rs, ok := p.routes[eventType]
	return ok && rs.policy.Ordered && !rs.policy.BlocksKey()
}

// rescueBatch rescues up to rescueBatch rows in one transaction: the
// rescue (sql/rescue.sql), then the delay of the rows whose attempt had
// started (sql/rescue_delay.sql), so that no claim sees them due in
// between. It reports whether it moved a row to dead on a route that skips
// dead rows (their keys' parked rows are then to be unparked).
func (p *Pool) rescueBatch(ctx context.Context) (n int, skippedDead bool, err error) {
	qctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
	defer cancel()
	tx, err := p.db.Begin(qctx)
	if err != nil {
		return 0, false, fmt.Errorf("rescue expired leases: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(qctx)) }()
	types, maxes := p.maxAttemptsByType()
	byType := make(map[string]int, len(types))
	for i, t := range types {
		byType[t] = int(maxes[i])
	}
	got, err := driver.Rescue(qctx, tx, driver.RescueParams{
		Limit: rescueBatch, MaxAttempts: p.cfg.MaxAttempts, MaxAttemptsByType: byType, ExpiredPrefix: expiredPrefix,
	})
	if err != nil {
		return 0, false, err
	}
	var delays []driver.RescueDelay
	for _, r := range got {
		if r.Started && r.Status == status.Received {
			delays = append(delays, driver.RescueDelay{ID: r.ID, Delay: p.rescueDelay(r.EventType, r.Attempts)})
		}
	}
	if err := driver.DelayRescued(qctx, tx, delays); err != nil {
		return 0, false, fmt.Errorf("rescue expired leases: %w", err)
	}
	if err := tx.Commit(qctx); err != nil {
		return 0, false, fmt.Errorf("rescue expired leases: commit: %w", err)
	}
	for _, r := range got {
		if r.Status == status.Dead && p.skipsDead(r.EventType) {
			skippedDead = true
		}
		p.metrics.rescued.WithLabelValues(string(r.Status)).Inc()
		msg := "rescued row with expired lease"
		if !r.Started {
			msg = "rescued row whose lease expired before its handler started; the attempt is not counted"
		}
		p.log.Warn().Int64("row_id", r.ID).Str("event_id", r.EventID).Str("event_type", r.EventType).
			Str("status", string(r.Status)).Int("attempts", r.Attempts).Bool("started", r.Started).Msg(msg)
	}
	return len(got), skippedDead, nil
}

// rescueDelay is how long a row of eventType rescued after its started
// attempt number attempt waits: its route's backoff after that attempt.
func (p *Pool) rescueDelay(eventType string, attempt int) time.Duration {
	p.mu.Lock()
	policy := p.routeForLocked(eventType).policy
	p.mu.Unlock()
	retry, _ := p.retryPolicy(policy)
	return retry.NextRetry(max(attempt, 1))
}

// Unpark releases parked rows of ordered routes that wait for nothing any
// more (see sql/unpark.sql) and reports how many. The rescue loop runs it
// every few rounds; it is exported for tools and tests.
func (p *Pool) Unpark(ctx context.Context) (int, error) {
	ordered, blocking := p.orderedTypes()
	total := 0
	for {
		qctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
		n, err := driver.Unpark(qctx, p.db, driver.UnparkParams{
			Limit: rescueBatch, OrderedTypes: ordered, BlockingTypes: blocking,
		})
		cancel()
		if err != nil {
			return total, err
		}
		total += n
		if n > 0 {
			signal(p.wake)
		}
		if n < rescueBatch {
			return total, nil
		}
	}
}

// statsLoop refreshes the live-row gauges.
func (p *Pool) statsLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.StatsInterval)
	defer t.Stop()
	for {
		if err := p.refreshStats(ctx); err != nil && ctx.Err() == nil {
			p.metrics.dbErrors.WithLabelValues("stats").Inc()
			p.log.Warn().Err(err).Msg("refreshing inbox gauges failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Pool) refreshStats(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
	defer cancel()
	st, err := ReadStats(ctx, p.db, p.cfg.StaleAfter)
	if err != nil {
		return err
	}
	p.metrics.rows.WithLabelValues(string(status.Received)).Set(float64(st.Received))
	p.metrics.rows.WithLabelValues(string(status.Processing)).Set(float64(st.Processing))
	p.metrics.rows.WithLabelValues(string(status.Dead)).Set(float64(st.Dead))
	p.metrics.rows.WithLabelValues(string(status.Rejected)).Set(float64(st.Rejected))
	p.metrics.staleRows.Set(float64(st.Stale))
	p.metrics.oldestReceived.Set(st.OldestReceivedAge.Seconds())
	p.metrics.oldestReady.Set(st.OldestReadyAge.Seconds())
	if _, blocking := p.orderedTypes(); len(blocking) > 0 {
		n, err := driver.BlockedKeys(ctx, p.db, blocking)
		if err != nil {
			return err
		}
		p.metrics.blockedKeys.Set(float64(n))
	} else {
		p.metrics.blockedKeys.Set(0)
	}
	return nil
}
