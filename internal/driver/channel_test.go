package driver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// The insert trigger of migrations/001_inbox.sql spells the channel out
// (a migration is history and keeps its text): its function, as a migrated
// database holds it, must notify on Channel, as sql/notify.sql and
// ListenSQL do. And a notification sent either way reaches a session that
// ran ListenSQL.
func TestTheChannelIsOne(t *testing.T) {
	t.Parallel()
	quoted := "pg_notify('" + Channel + "'"
	if !strings.Contains(notifySQL, quoted) {
		t.Errorf("sql/notify.sql does not notify on %q:\n%s", Channel, notifySQL)
	}
	if ListenSQL != "LISTEN "+Channel {
		t.Errorf("ListenSQL = %q", ListenSQL)
	}

	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var body string
	err := db.Pool.QueryRow(ctx, `
		SELECT p.prosrc
		FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
		WHERE t.tgrelid = 'inbox'::regclass AND t.tgname = 'inbox_notify_received'`).Scan(&body)
	if err != nil {
		t.Fatalf("the inbox table's notify trigger: %v", err)
	}
	if strings.Count(body, "pg_notify(") != 1 || !strings.Contains(body, quoted) {
		t.Errorf("the trigger's function does not notify on %q alone:\n%s", Channel, body)
	}

	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, ListenSQL); err != nil {
		t.Fatal(err)
	}
	if _, _, err := InsertBatch(ctx, db.Pool, []NewRow{{Source: "s", EventID: "e", EventType: "t", Payload: []byte{},
		Headers: []byte("{}"), Status: "received"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := Notify(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	for _, by := range []string{"the insert trigger", "Notify"} {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for %s's notification: %v", by, err)
		}
		if n.Channel != Channel {
			t.Errorf("%s notified on %q, want %q", by, n.Channel, Channel)
		}
	}
}
