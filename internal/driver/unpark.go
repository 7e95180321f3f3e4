package driver

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var (
	// unparkSQL and unparkDeletedSQL are text/templates, for the rules
	// they share (sql/holds_key.sql, sql/unpark_successors.sql).
	unparkSQL        = renderWorker("unpark.sql", true)
	unparkDeletedSQL = renderWorker("unpark_deleted.sql", true)
)

// UnparkParams are what the unpark sweep (sql/unpark.sql) needs to know of
// the routes.
type UnparkParams struct {
	// Limit caps the rows one statement unparks.
	Limit int
	// OrderedTypes are the event types of the ordered routes; parked rows
	// of other types wait for nothing.
	OrderedTypes []string
	// BlockingTypes are the event types of the ordered routes whose dead
	// rows hold their key back (on_dead: block).
	BlockingTypes []string
}

// Unpark releases up to p.Limit parked rows that wait for nothing any more
// (sql/unpark.sql) and reports how many.
func Unpark(ctx context.Context, db DB, p UnparkParams) (int, error) {
	tag, err := db.Exec(ctx, unparkSQL, pgx.NamedArgs{
		// The types appended to an empty slice: never nil, which would be
		// a NULL array.
		"limit": p.Limit, "ordered_types": append([]string{}, p.OrderedTypes...),
		"blocking_types": append([]string{}, p.BlockingTypes...),
	})
	if err != nil {
		return 0, fmt.Errorf("unpark ordered rows: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// UnparkDeleted unparks the next row of each deleted row's key
// (sql/unpark_deleted.sql), in the transaction that deleted the rows,
// after the delete. Rows without a key need nothing.
func UnparkDeleted(ctx context.Context, tx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, rows []DeletedRow) error {
	var ids []int64
	var sources, types []string
	var keys [][]byte
	for _, r := range rows {
		if r.Key == nil {
			continue
		}
		ids = append(ids, r.ID)
		sources = append(sources, r.Source)
		keys = append(keys, r.Key)
		types = append(types, r.EventType)
	}
	if len(ids) == 0 {
		return nil
	}
	kinds := slices.Clone(types)
	slices.Sort(kinds)
	kinds = slices.Compact(kinds)
	if _, err := tx.Exec(ctx, unparkDeletedSQL, pgx.NamedArgs{
		"ids": ids, "sources": sources, "keys": keys, "event_types": types,
		"ordered_types": kinds, "blocking_types": kinds,
	}); err != nil {
		return fmt.Errorf("unpark the rows behind %d deleted rows: %w", len(ids), err)
	}
	return nil
}
