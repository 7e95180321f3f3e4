package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// insertRows runs sql, which inserts rows into table (inbox or outbox),
// and returns the table's ids by event id.
func insertRows(t *testing.T, db *pgtest.DB, table, sql string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT event_id, id FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	ids := make(map[string]int64)
	for rows.Next() {
		var e string
		var id int64
		if err := rows.Scan(&e, &id); err != nil {
			t.Fatal(err)
		}
		ids[e] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// rowState is what the requeue tests check of a row.
type rowState struct {
	Status        string
	Attempts      int
	DueNow        bool // available_at within a minute of now()
	Started       bool
	LeaseToken    *int64
	LastError     *string
	UpdatedRecent bool
}

func stateOf(t *testing.T, db *pgtest.DB, id int64) rowState {
	t.Helper()
	var s rowState
	err := db.Pool.QueryRow(context.Background(), `
		SELECT status, attempts, available_at BETWEEN now() - interval '1 minute' AND now(), started, lease_token, last_error,
		       updated_at > now() - interval '1 minute'
		FROM inbox WHERE id = $1`, id).Scan(&s.Status, &s.Attempts, &s.DueNow, &s.Started, &s.LeaseToken, &s.LastError, &s.UpdatedRecent)
	if err != nil {
		t.Fatalf("row %d: %v", id, err)
	}
	return s
}

// The report an operator got wrong: `requeue --id` of a processed row or of
// no row at all printed "requeued 0 dead rows" and exited 0. Now each id
// that did not match says why, and nothing matching exits 1.
func TestRequeueSaysWhyAnIDDidNotMatch(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ids := insertRows(t, db, "inbox", `
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error) VALUES
		  ('s', 'processed-1', 'order.created', 'processed', 1, NULL),
		  ('s', 'received-1', 'order.created', 'received', 0, NULL),
		  ('s', 'rejected-1', '', 'rejected', 0, 'missing event type'),
		  ('s', 'dead-1', 'order.created', 'dead', 3, 'boom'),
		  ('s', 'dead-other-type', 'invoice.sent', 'dead', 3, 'boom');
		UPDATE inbox SET status = 'processing', lease_token = 7, lease_expires_at = now() + interval '1 minute'
		WHERE event_id = 'received-1'`)
	env := []string{"INBOXD_DATABASE_URL=" + db.URL}

	for _, tt := range []struct {
		name string
		id   string
		want string
	}{
		{"processed", itoa(ids["processed-1"]), "id " + itoa(ids["processed-1"]) + ": processed, not dead"},
		{"processing", itoa(ids["received-1"]), "id " + itoa(ids["received-1"]) + ": processing, not dead"},
		{"rejected", itoa(ids["rejected-1"]), "id " + itoa(ids["rejected-1"]) + ": rejected, not dead (use --status rejected)"},
		{"no such row", "9999", "id 9999: no such row"},
	} {
		code, out, stderr := runMain(t, env, "requeue", "--id", tt.id)
		if code != ExitFailure {
			t.Errorf("%s: requeue --id %s: exit %d, want %d (nothing matched)\n%s%s", tt.name, tt.id, code, ExitFailure, out, stderr)
		}
		if !strings.Contains(out, tt.want+"\n") || !strings.Contains(out, "requeued 0 dead rows") {
			t.Errorf("%s: requeue --id %s printed:\n%s\nwant a line %q and the count", tt.name, tt.id, out, tt.want)
		}
		if !strings.Contains(stderr, "nothing matched") {
			t.Errorf("%s: stderr %q does not say nothing matched", tt.name, stderr)
		}
	}
	if s := stateOf(t, db, ids["processed-1"]); s.Status != "processed" {
		t.Errorf("the processed row became %s", s.Status)
	}

	// A dead row excluded by another filter says which one.
	code, out, _ := runMain(t, env, "requeue", "--id", itoa(ids["dead-other-type"]), "--type", "order.created")
	if code != ExitFailure || !strings.Contains(out, `dead, but its type is "invoice.sent", not "order.created"`) {
		t.Errorf("requeue --id of a dead row of another type: exit %d\n%s", code, out)
	}

	// Some ids match, some do not: the matching ones are requeued, the
	// others explained, and the command succeeds.
	code, out, stderr := runMain(t, env, "requeue", "--id", itoa(ids["dead-1"])+",9999,"+itoa(ids["processed-1"]))
	if code != ExitOK {
		t.Fatalf("partial match: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{"id 9999: no such row", "id " + itoa(ids["processed-1"]) + ": processed, not dead", "requeued 1 dead row\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("partial match: no %q in:\n%s", want, out)
		}
	}
	if s := stateOf(t, db, ids["dead-1"]); s.Status != "received" {
		t.Errorf("the dead row is %s after requeue", s.Status)
	}
}

// A requeued dead row is fresh (attempts 0, due now, not started, no
// lease) and keeps last_error; the filters (--type, --source, --since,
// --until) combine; --dry-run changes nothing; the workers are woken with
// exactly one notification per requeue.
func TestRequeueDeadRows(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ids := insertRows(t, db, "inbox", `
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error, available_at, updated_at) VALUES
		  ('shop', 'old',     'order.created', 'dead', 10, 'http 422', now() - interval '3 days', now() - interval '3 days'),
		  ('shop', 'recent',  'order.created', 'dead', 10, 'http 500', now() + interval '1 hour', now() - interval '1 hour'),
		  ('shop', 'invoice', 'invoice.sent',  'dead', 2,  'no handler', now(), now() - interval '1 hour'),
		  ('billing', 'bill', 'order.created', 'dead', 1,  'timeout', now(), now() - interval '1 hour')`)
	env := []string{"INBOXD_DATABASE_URL=" + db.URL}

	if code, _, stderr := runMain(t, env, "requeue"); code != ExitUsage || !strings.Contains(stderr, "--all") {
		t.Fatalf("requeue without a filter: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runMain(t, env, "requeue", "--since", "yesterday"); code != ExitUsage || !strings.Contains(stderr, "--since") {
		t.Fatalf("requeue --since yesterday: exit %d, stderr %q", code, stderr)
	}

	// --dry-run lists what --type and --source and --since select, and
	// changes nothing.
	code, out, stderr := runMain(t, env, "requeue", "--type", "order.created", "--source", "shop", "--since", "24h", "--dry-run")
	if code != ExitOK {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, stderr)
	}
	if want := "would requeue id " + itoa(ids["recent"]) + ": shop recent order.created"; !strings.Contains(out, want) ||
		strings.Count(out, "would requeue id") != 1 || !strings.Contains(out, "would requeue 1 dead row") {
		t.Fatalf("dry run printed:\n%s\nwant only %q", out, want)
	}
	if s := stateOf(t, db, ids["recent"]); s.Status != "dead" || s.Attempts != 10 {
		t.Fatalf("dry run changed the row: %+v", s)
	}

	// --until with an RFC 3339 time: only the 3-day-old row.
	until := time.Now().Add(-48 * time.Hour).UTC().Format(time.RFC3339)
	listener := listen(t, db)
	code, out, _ = runMain(t, env, "requeue", "--all", "--until", until)
	if code != ExitOK || !strings.Contains(out, "requeued 1 dead row\n") {
		t.Fatalf("requeue --until: exit %d\n%s", code, out)
	}
	if n := listener.countUntilMarker(t); n != 1 {
		t.Errorf("requeue sent %d notifications on %s, want 1", n, driver.Channel)
	}
	s := stateOf(t, db, ids["old"])
	if s.Status != "received" || s.Attempts != 0 || !s.DueNow || s.Started || s.LeaseToken != nil ||
		s.LastError == nil || *s.LastError != "http 422" || !s.UpdatedRecent {
		t.Fatalf("requeued row: %+v (last_error %v)", s, deref(s.LastError))
	}

	// --all requeues the rest, with one notification for three rows.
	code, out, _ = runMain(t, env, "requeue", "--all")
	if code != ExitOK || !strings.Contains(out, "requeued 3 dead rows") {
		t.Fatalf("requeue --all: exit %d\n%s", code, out)
	}
	if n := listener.countUntilMarker(t); n != 1 {
		t.Errorf("requeue --all of 3 rows sent %d notifications, want 1", n)
	}
	if s := stateOf(t, db, ids["recent"]); s.Status != "received" || !s.DueNow {
		t.Fatalf("row waiting an hour was requeued as %+v: want due now", s)
	}
	// Nothing left: exit 1, and no notification.
	if code, out, _ := runMain(t, env, "requeue", "--all"); code != ExitFailure || !strings.Contains(out, "requeued 0 dead rows") {
		t.Fatalf("requeue --all with no dead rows: exit %d\n%s", code, out)
	}
	if n := listener.countUntilMarker(t); n != 0 {
		t.Errorf("a requeue of nothing sent %d notifications", n)
	}
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// notifications LISTENs on driver.Channel on a connection of its own.
type notifications struct {
	conn   *pgx.Conn
	marker int
}

func listen(t *testing.T, db *pgtest.DB) *notifications {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, driver.ListenSQL); err != nil {
		t.Fatal(err)
	}
	return &notifications{conn: conn}
}

// countUntilMarker sends a marker notification on the channel (after
// everything the command sent: notifications arrive in commit order) and
// counts the notifications received before it.
func (n *notifications) countUntilMarker(t *testing.T) int {
	t.Helper()
	n.marker++
	marker := "marker-" + itoa(int64(n.marker))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.conn.Exec(ctx, "SELECT pg_notify($1, $2)", driver.Channel, marker); err != nil {
		t.Fatal(err)
	}
	count := 0
	for {
		msg, err := n.conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for notifications: %v", err)
		}
		if msg.Payload == marker {
			return count
		}
		count++
	}
}
