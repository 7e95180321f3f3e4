package pubtest

import (
	"context"
	"testing"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// KeyHeldWhilePending fails t if, in one snapshot of the table, first is
// pending while a row of later is published.
func KeyHeldWhilePending(t *testing.T, db *pgtest.DB, first string, later ...string) (firstStatus string) {
	t.Helper()
	var published int
	if err := db.Pool.QueryRow(context.Background(), `
		SELECT (SELECT status FROM outbox WHERE event_id = $1),
		       (SELECT count(*) FROM outbox WHERE event_id = ANY ($2) AND status = 'published')`,
		first, later).Scan(&firstStatus, &published); err != nil {
		t.Fatal(err)
	}
	if firstStatus == "pending" && published > 0 {
		t.Fatalf("%d of %v published while %s, before them in their key, is still pending", published, later, first)
	}
	return firstStatus
}
