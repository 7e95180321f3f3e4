package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	retentionProcessedSQL = load("retention_processed.sql")
	// retentionFailedSQL and retentionCountSQL are text/templates, for the
	// rule they share (sql/holds_key.sql): dead rows that hold their key
	// back are kept.
	retentionFailedSQL = renderWorker("retention_failed.sql", true)
	retentionCountSQL  = renderWorker("retention_count.sql", true)
)

// DeleteProcessed deletes one batch of at most batch processed rows
// processed more than olderThan ago (sql/retention_processed.sql) and
// reports how many it deleted.
func DeleteProcessed(ctx context.Context, db DB, olderThan time.Duration, batch int) (int64, error) {
	tag, err := db.Exec(ctx, retentionProcessedSQL, pgx.NamedArgs{
		"retention_ms": olderThan.Milliseconds(), "batch": batch,
	})
	if err != nil {
		return 0, fmt.Errorf("delete expired processed rows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DeleteFailed deletes one batch of at most batch dead and rejected rows
// that failed more than olderThan ago, but for the dead rows of
// blockingTypes that hold their key back (sql/retention_failed.sql), and
// reports how many it deleted.
func DeleteFailed(ctx context.Context, db DB, olderThan time.Duration, batch int, blockingTypes []string) (int64, error) {
	blocking := append([]string{}, blockingTypes...) // never nil: a NULL array
	tag, err := db.Exec(ctx, retentionFailedSQL, pgx.NamedArgs{
		"retention_ms": olderThan.Milliseconds(), "batch": batch,
		"ordered_types": blocking, "blocking_types": blocking,
	})
	if err != nil {
		return 0, fmt.Errorf("delete expired failed rows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ExpiredParams say which rows CountExpired counts.
type ExpiredParams struct {
	// Processed is the retention of processed rows.
	Processed time.Duration
	// Failed is the retention of dead and rejected rows; 0 counts none.
	Failed time.Duration
	// BlockingTypes are the event types whose dead rows with a key hold it
	// back: they are kept, and not counted.
	BlockingTypes []string
}

// Expired counts the rows a retention pass would delete now.
type Expired struct {
	// Processed is the number of processed rows.
	Processed int64
	// Failed is the number of dead and rejected rows.
	Failed int64
}

// CountExpired counts the rows a retention pass would delete now
// (sql/retention_count.sql).
func CountExpired(ctx context.Context, db DB, p ExpiredParams) (Expired, error) {
	var e Expired
	blocking := append([]string{}, p.BlockingTypes...) // never nil: a NULL array
	err := db.QueryRow(ctx, retentionCountSQL, pgx.NamedArgs{
		"processed_ms": p.Processed.Milliseconds(), "failed_ms": p.Failed.Milliseconds(),
		"ordered_types": blocking, "blocking_types": blocking,
	}).Scan(&e.Processed, &e.Failed)
	if err != nil {
		return Expired{}, fmt.Errorf("count expired rows: %w", err)
	}
	return e, nil
}
