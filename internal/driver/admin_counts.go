package driver

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
