package worker

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/driver"
)

// DeletedRow is an inbox row deleted by hand, as UnparkAfterDelete needs it.
type DeletedRow struct {
	// ID is the deleted row's id: its successor is the next one after it.
	ID int64
	// Source and Key are the deleted row's ordering key; a nil Key has none.
	Source string
	Key    []byte
	// EventType is the deleted row's type (see sql/unpark_deleted.sql).
	EventType string
}

// UnparkAfterDelete unparks the next row of each deleted row's key, as a
// completion does (see sql/unpark_deleted.sql), so that the key of a dead
// head deleted by `inboxd discard` moves on at once rather than at the
// sweeper's next pass. Call it in the transaction that deleted the rows,
// after the delete. Rows without a key need nothing.
func UnparkAfterDelete(ctx context.Context, tx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, rows []DeletedRow) error {
	deleted := make([]driver.DeletedRow, len(rows))
	for i, r := range rows {
		deleted[i] = driver.DeletedRow(r)
	}
	return driver.UnparkDeleted(ctx, tx, deleted)
}
