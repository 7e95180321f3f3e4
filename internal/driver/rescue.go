package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/driver/status"
)

var (
	rescueSQL        = render("rescue.sql", nil, "attempts_record.sql")
	rescueDelaySQL   = load("rescue_delay.sql")
	startsOrphansSQL = load("starts_orphans.sql")
)

// RescueParams are what a rescue (sql/rescue.sql) needs to know of the
// routes.
type RescueParams struct {
	// Limit caps the rows one rescue returns.
	Limit int
	// MaxAttempts is the attempts after which a started row goes dead,
	// unless its route has its own (MaxAttemptsByType).
	MaxAttempts int
	// MaxAttemptsByType holds the routes' own max attempts, by event type,
	// where they differ from MaxAttempts.
	MaxAttemptsByType map[string]int
	// ExpiredPrefix begins the last_error written on a row whose lease
	// expired during a started attempt (the claim's suspects lookup reads
	// it back).
	ExpiredPrefix string
}

// Rescued is a row a rescue moved, as it left it.
type Rescued struct {
	// ID, EventID and EventType identify the row.
	ID        int64
	EventID   string
	EventType string
	// Status is received, or dead when its attempts are used up.
	Status status.Status
	// Attempts is the row's attempts after the rescue (refunded when the
	// attempt had not started).
	Attempts int
	// Started reports whether the expired attempt had started.
	Started bool
}

// Rescue returns up to p.Limit rows whose lease expired to received (or
// dead) and returns them (sql/rescue.sql); each started attempt it ends
// is written to its row's history, outcome "lease expired", in the same
// statement. Run it in a transaction with
// DelayRescued for the started ones, so that no claim sees them due in
// between.
func Rescue(ctx context.Context, db DB, p RescueParams) ([]Rescued, error) {
	types, maxes := make([]string, 0, len(p.MaxAttemptsByType)), make([]int32, 0, len(p.MaxAttemptsByType))
	for t, m := range p.MaxAttemptsByType {
		types = append(types, t)
		maxes = append(maxes, int32(m))
	}
	rows, err := db.Query(ctx, rescueSQL, pgx.NamedArgs{
		"limit": p.Limit, "max_attempts": p.MaxAttempts, "max_types": types, "max_values": maxes,
		"expired_prefix": p.ExpiredPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("rescue expired leases: %w", err)
	}
	var (
		got []Rescued
		r   Rescued
		st  string
	)
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.EventID, &r.EventType, &st, &r.Attempts, &r.Started}, func() error {
		r.Status = status.Status(st)
		got = append(got, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rescue expired leases: %w", err)
	}
	return got, nil
}

// RescueDelay is how long one rescued row waits before it is due again.
type RescueDelay struct {
	// ID is the row's id.
	ID int64
	// Delay is counted from now; it is written in whole milliseconds.
	Delay time.Duration
}

// DelayRescued delays rows a rescue has just returned to received
// (sql/rescue_delay.sql), in the rescue's transaction.
func DelayRescued(ctx context.Context, db DB, delays []RescueDelay) error {
	if len(delays) == 0 {
		return nil
	}
	ids, ms := make([]int64, len(delays)), make([]int64, len(delays))
	for i, d := range delays {
		ids[i], ms[i] = d.ID, d.Delay.Milliseconds()
	}
	if _, err := db.Exec(ctx, rescueDelaySQL, pgx.NamedArgs{"ids": ids, "delays_ms": ms}); err != nil {
		return fmt.Errorf("delay the rescued rows: %w", err)
	}
	return nil
}

// DeleteOrphanStarts deletes the start bits of claims no worker holds any
// more and not written for olderThan (sql/starts_orphans.sql), and reports
// how many it deleted.
func DeleteOrphanStarts(ctx context.Context, db DB, olderThan time.Duration) (int64, error) {
	tag, err := db.Exec(ctx, startsOrphansSQL, pgx.NamedArgs{"older_ms": olderThan.Milliseconds()})
	if err != nil {
		return 0, fmt.Errorf("delete orphaned start bits: %w", err)
	}
	return tag.RowsAffected(), nil
}
