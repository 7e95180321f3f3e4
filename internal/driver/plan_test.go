package driver

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// planWithoutSeqScans returns the plan of sql with args (nil: none) as the
// planner makes it when sequential scans are its last resort
// (enable_seqscan off, in a transaction rolled back): a statement that can
// read its rows through an index does so in it.
func planWithoutSeqScans(t *testing.T, db *pgxpool.Pool, sql string, args pgx.NamedArgs) string {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	var params []any
	if args != nil {
		params = append(params, args)
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+sql, params...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
