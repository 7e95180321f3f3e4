package maintenance

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/worker"
)

// ExpiredPrefix begins the last_error the rescuer writes on a row whose
// lease expired during a started attempt ("lease expired during attempt 2
// (worker … lost the row)"); the claim's suspects lookup reads it back.
const ExpiredPrefix = "lease expired during attempt "

// rescueBatch caps the rows one rescue statement returns (and one unpark
// statement of the sweeper's).
const rescueBatch = 1000

// unparker unparks the ordered rows that wait for nothing any more (the
// Sweeper), for the rescuer's dead rows on routes that skip them.
type unparker interface {
	Unpark(ctx context.Context) (int, error)
}

// Rescuer returns the rows whose lease expired (their worker died, hung or
// lost the database) to received, or dead when their attempts are used up,
// every RescueInterval. It is a service (periodic).
type Rescuer struct {
	periodic
	db               *pgxpool.Pool
	routes           RescueRoutes
	unparker         unparker
	wake             func() // rows may be due: the claim loop looks
	maxAttempts      int
	statementTimeout time.Duration
	log              zerolog.Logger
	metrics          *Metrics
}

// newRescuer returns a rescuer of the rows on db, after cfg
// (RescueInterval, MaxAttempts, StatementTimeout) and routes, that unparks
// through u and calls wake when it returned rows.
func newRescuer(db *pgxpool.Pool, routes RescueRoutes, u unparker, wake func(), cfg worker.Config, log zerolog.Logger, m *Metrics) *Rescuer {
	r := &Rescuer{
		db: db, routes: routes, unparker: u, wake: wake,
		maxAttempts: cfg.MaxAttempts, statementTimeout: cfg.StatementTimeout,
		log: log, metrics: m,
	}
	r.periodic = periodic{interval: cfg.RescueInterval, round: r.round}
	return r
}

// round rescues, and reports a failure.
func (r *Rescuer) round(ctx context.Context) {
	if _, err := r.Rescue(ctx); err != nil && ctx.Err() == nil {
		r.metrics.DBErrors.WithLabelValues("rescue").Inc()
		r.log.Error().Err(err).Msg("rescue failed")
	}
}

// Rescue returns every row whose lease has expired to received (or dead,
// when its attempts are used up) and reports how many rows it moved. A row
// moved to dead on an ordered route whose dead rows do not block (on_dead:
// skip) lets its key go on, as a completion to dead does: the rows parked
// behind it are unparked at once, not at the sweeper's next round. A row
// whose attempt had started waits its route's backoff, as a retry would:
// it may be the one whose handler killed its worker.
func (r *Rescuer) Rescue(ctx context.Context) (int, error) {
	total, skippedDead := 0, false
	defer func() {
		if !skippedDead || ctx.Err() != nil {
			return
		}
		if _, err := r.unparker.Unpark(ctx); err != nil {
			r.metrics.DBErrors.WithLabelValues("rescue").Inc()
			r.log.Error().Err(err).Msg("unparking the rows behind rescued dead rows failed; the sweeper unparks them later")
		}
	}()
	for {
		n, sd, err := r.rescueBatch(ctx)
		skippedDead = skippedDead || sd
		total += n
		if err != nil {
			return total, err
		}
		if n > 0 {
			r.wake()
		}
		if n < rescueBatch {
			return total, nil
		}
	}
}

// rescueBatch rescues up to rescueBatch rows in one transaction: the
// rescue (sql/rescue.sql), then the delay of the rows whose attempt had
// started (sql/rescue_delay.sql), so that no claim sees them due in
// between. It reports whether it moved a row to dead on a route that skips
// dead rows (their keys' parked rows are then to be unparked).
func (r *Rescuer) rescueBatch(ctx context.Context) (n int, skippedDead bool, err error) {
	qctx, cancel := context.WithTimeout(ctx, r.statementTimeout)
	defer cancel()
	tx, err := r.db.Begin(qctx)
	if err != nil {
		return 0, false, fmt.Errorf("rescue expired leases: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(qctx)) }()
	types, maxes := r.routes.MaxAttemptsByType()
	byType := make(map[string]int, len(types))
	for i, t := range types {
		byType[t] = int(maxes[i])
	}
	got, err := driver.Rescue(qctx, tx, driver.RescueParams{
		Limit: rescueBatch, MaxAttempts: r.maxAttempts, MaxAttemptsByType: byType, ExpiredPrefix: ExpiredPrefix,
	})
	if err != nil {
		return 0, false, err
	}
	var delays []driver.RescueDelay
	for _, row := range got {
		if row.Started && row.Status == status.Received {
			delays = append(delays, driver.RescueDelay{ID: row.ID, Delay: r.routes.RescueDelay(row.EventType, row.Attempts)})
		}
	}
	if err := driver.DelayRescued(qctx, tx, delays); err != nil {
		return 0, false, fmt.Errorf("rescue expired leases: %w", err)
	}
	if err := tx.Commit(qctx); err != nil {
		return 0, false, fmt.Errorf("rescue expired leases: commit: %w", err)
	}
	for _, row := range got {
		if row.Status == status.Dead && r.routes.SkipsDead(row.EventType) {
			skippedDead = true
		}
		r.metrics.Rescued.WithLabelValues(string(row.Status)).Inc()
		msg := "rescued row with expired lease"
		if !row.Started {
			msg = "rescued row whose lease expired before its handler started; the attempt is not counted"
		}
		r.log.Warn().Int64("row_id", row.ID).Str("event_id", row.EventID).Str("event_type", row.EventType).
			Str("status", string(row.Status)).Int("attempts", row.Attempts).Bool("started", row.Started).Msg(msg)
	}
	return len(got), skippedDead, nil
}
