package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/migrations"
	"github.com/inboxd/inboxd/migrations/pgtest"
)

// Several replicas migrating one empty database at once must all succeed
// and leave exactly one schema: tern's advisory lock serialises them.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var g errgroup.Group
	for range 4 {
		g.Go(func() error {
			conn, err := pgx.Connect(ctx, db.URL)
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			_, err = migrations.Migrate(ctx, conn)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("concurrent migrate: %v", err)
	}

	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	current, latest, err := migrations.Status(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if current != latest || latest == 0 {
		t.Fatalf("schema version = %d, want latest %d", current, latest)
	}
	res, err := migrations.Migrate(ctx, conn)
	if err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if res.From != latest || res.To != latest {
		t.Fatalf("re-running migrate changed the version: %+v", res)
	}
}

// The contract: any service may insert a row with only
// (source, event_id, event_type, payload); the unique index deduplicates it,
// and the status check rejects unknown statuses.
func TestInboxTableContract(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	insert := `INSERT INTO inbox (source, event_id, event_type, payload) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`
	payload := []byte{0x00, 0xff, 0xfe, 'x'} // NUL and invalid UTF-8 must survive
	tag, err := db.Pool.Exec(ctx, insert, "orders", "e-1", "order.created", payload)
	if err != nil {
		t.Fatalf("minimal insert: %v", err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("first insert affected %d rows", tag.RowsAffected())
	}
	tag, err = db.Pool.Exec(ctx, insert, "orders", "e-1", "order.created", payload)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 0 {
		t.Fatalf("duplicate (source, event_id) inserted a second row")
	}
	if _, err := db.Pool.Exec(ctx, insert, "billing", "e-1", "order.created", payload); err != nil {
		t.Fatalf("same event id from another source must be a new row: %v", err)
	}

	var status string
	var attempts int
	var got []byte
	var availableAt time.Time
	if err := db.Pool.QueryRow(ctx,
		`SELECT status, attempts, payload, available_at FROM inbox WHERE source = 'orders' AND event_id = 'e-1'`,
	).Scan(&status, &attempts, &got, &availableAt); err != nil {
		t.Fatal(err)
	}
	if status != "received" || attempts != 0 || string(got) != string(payload) || time.Since(availableAt) > time.Minute {
		t.Fatalf("defaults: status=%q attempts=%d payload=%x available_at=%v", status, attempts, got, availableAt)
	}

	if _, err := db.Pool.Exec(ctx, `UPDATE inbox SET status = 'done'`); err == nil {
		t.Fatal("status check constraint accepted an unknown status")
	}
	// The lease invariant the workers' fencing relies on.
	if _, err := db.Pool.Exec(ctx, `UPDATE inbox SET status = 'processing'`); err == nil {
		t.Fatal("a processing row without a lease was accepted")
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE inbox SET lease_token = 1, lease_expires_at = now()`); err == nil {
		t.Fatal("a lease on a row that is not processing was accepted")
	}
}
