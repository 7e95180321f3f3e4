package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/driver"
)

// Stats are the inbox's live figures, as the gauges and `inboxd stats` show
// them. They are read through the partial indexes on the live statuses
// only, never by counting processed rows.
type Stats struct {
	// Received, Processing, Dead and Rejected count the rows in each status.
	Received, Processing, Dead, Rejected int64
	// Stale counts received rows (waiting in backoff included) whose
	// received_at is older than the staleAfter given to ReadStats.
	Stale int64
	// OldestReceivedAge is the age by received_at of the oldest received
	// row, rows waiting in backoff included; zero when there is none.
	OldestReceivedAge time.Duration
	// OldestReadyAge is how long the oldest due received row has waited
	// since its available_at: are the workers keeping up?
	OldestReadyAge time.Duration
}

// ReadStats reads the inbox's live figures from db in one statement.
func ReadStats(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, staleAfter time.Duration) (Stats, error) {
	s, err := driver.ReadStats(ctx, db, staleAfter)
	// The same figures, field by field (a conversion: the types must stay
	// alike).
	return Stats(s), err
}
