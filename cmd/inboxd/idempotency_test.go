package main

import (
	"context"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// The reported case, end to end: rows (sql, 'evt-7'), (sql, 'evt-7 ') and
// (sql, E'evt-7\t'), inserted by SQL, are three rows, and the daemon's http
// route must deliver each with an Idempotency-Key of its own. All three once
// arrived as "sql/evt-7" (HTTP trims blanks at either end of a header value),
// so a sink deduplicating on the key kept one of three events.
func TestSQLRowsWithBlanksGetTheirOwnIdempotencyKeys(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := newSink(t)
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: http\n    url: "+s.URL+"/hook\n")
	d := startDaemon(t, "INBOXD_DATABASE_URL="+db.URL, "INBOXD_ROUTES="+routes)
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO inbox (source, event_id, event_type, payload)
		VALUES ('sql', 'evt-7', 'order.created', '{}'), ('sql', 'evt-7 ', 'order.created', '{}'),
		       ('sql', E'evt-7\t', 'order.created', '{}')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the three rows processed", func() bool { return countStatus(t, db, "processed") == 3 })
	for key, want := range map[string]int{"sql/evt-7": 1, "sql/evt-7%20": 1, "sql/evt-7%09": 1} {
		if got := len(s.ByKey(key)); got != want {
			t.Errorf("Idempotency-Key %q delivered %d times, want %d; the sink got %+v", key, got, want, s.Deliveries())
		}
	}
	if code := terminate(t, d, 30*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}
}
