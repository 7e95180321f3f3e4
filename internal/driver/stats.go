package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	statsSQL       = load("stats.sql")
	blockedKeysSQL = load("blocked_keys.sql")
)

// Stats are the inbox's live figures (sql/stats.sql), read through the
// partial indexes on the live statuses only.
type Stats struct {
	// Received, Processing, Dead and Rejected count the rows in each status.
	// Dead and Rejected are exact up to ExactCountLimit; above it they are
	// estimates (DeadEstimated, RejectedEstimated), never below
	// ExactCountLimit + 1.
	Received, Processing, Dead, Rejected int64
	// DeadEstimated and RejectedEstimated say Dead and Rejected are
	// estimates (from the table's statistics, as recent as its last
	// ANALYZE or autovacuum's).
	DeadEstimated, RejectedEstimated bool
	// Stale counts received rows (waiting in backoff included) whose
	// received_at is older than the staleAfter given to ReadStats.
	Stale int64
	// OldestReceivedAge is the age by received_at of the oldest received
	// row, rows waiting in backoff included; zero when there is none.
	OldestReceivedAge time.Duration
	// OldestReadyAge is how long the oldest due received row has waited
	// since its available_at.
	OldestReadyAge time.Duration
}

// ExactCountLimit is how many dead (and rejected) rows ReadStats counts
// one by one; past it their count is an estimate (an exact count read
// every dead row's index entry: 0.1 to 0.3 s for 100,000 of them).
const ExactCountLimit = 10_000

// ReadStats reads the inbox's live figures in one statement
// (sql/stats.sql); received rows older than staleAfter are stale.
func ReadStats(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, staleAfter time.Duration) (Stats, error) {
	var s Stats
	var oldestReceived, oldestReady float64
	if err := db.QueryRow(ctx, statsSQL, pgx.NamedArgs{"stale_ms": staleAfter.Milliseconds(), "exact_upto": ExactCountLimit}).Scan(
		&s.Received, &s.Processing, &s.Dead, &s.Rejected, &s.DeadEstimated, &s.RejectedEstimated,
		&s.Stale, &oldestReceived, &oldestReady); err != nil {
		return Stats{}, fmt.Errorf("inbox stats: %w", err)
	}
	s.OldestReceivedAge = time.Duration(oldestReceived * float64(time.Second))
	s.OldestReadyAge = time.Duration(oldestReady * float64(time.Second))
	return s, nil
}

// BlockedKeys counts the keys held back by a dead row of one of
// blockingTypes (sql/blocked_keys.sql).
func BlockedKeys(ctx context.Context, db DB, blockingTypes []string) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, blockedKeysSQL, pgx.NamedArgs{"blocking_types": append([]string{}, blockingTypes...)}).Scan(&n); err != nil {
		return 0, fmt.Errorf("blocked keys: %w", err)
	}
	return n, nil
}
