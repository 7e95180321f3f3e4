package driver

// Statements that look at the inbox as a whole, for operators, the demo
// and start-up checks: never on a replica's hot path.

import (
	"context"

	"github.com/inboxd/inboxd/internal/driver/status"
)

var statusCountsSQL = load("status_counts.sql")

// StatusCounts returns how many rows each status has, processed rows
// included; a status without rows is absent (sql/status_counts.sql). It
// reads the whole table: for small ones (the demo, tests), never on a
// replica's hot path.
func StatusCounts(ctx context.Context, db DB) (map[status.Status]int64, error) {
	rows, err := db.Query(ctx, statusCountsSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[status.Status]int64{}
	for rows.Next() {
		var s status.Status
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

var autovacuumSQL = load("autovacuum.sql")

// Autovacuum reports whether autovacuum is on for the server and enabled
// for the inbox table (sql/autovacuum.sql).
func Autovacuum(ctx context.Context, db DB) (server, table bool, err error) {
	err = db.QueryRow(ctx, autovacuumSQL).Scan(&server, &table)
	return server, table, err
}
