package migrations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/migrations"
)

// Several replicas migrating one empty database at once must all succeed
// and leave exactly one schema: the migration lock serialises them.
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
	// A received row may hold a reservation (a row handed off at ingest,
	// migration 013): a token with its expiry, never one without the other.
	if _, err := db.Pool.Exec(ctx, `UPDATE inbox SET lease_token = 1`); err == nil {
		t.Fatal("a lease token without its expiry was accepted")
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE inbox SET lease_token = 1, lease_expires_at = now()`); err != nil {
		t.Fatalf("a reservation on a received row was refused: %v", err)
	}
	// A finished row never keeps a lease.
	for _, st := range []string{"processed", "dead", "rejected"} {
		if _, err := db.Pool.Exec(ctx, `UPDATE inbox SET status = $1`, st); err == nil {
			t.Fatalf("a lease on a %s row was accepted", st)
		}
	}
}

// Rollback: a binary older than the schema runs when every migration it does
// not know keeps it compatible (expand), and refuses otherwise (contract).
// The newer migration is simulated by bumping the version and recording its
// compatibility, as a newer binary's Migrate would.
func TestOlderBinaryOnNewerSchema(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name            string
		oldestCompat    func(latest int32) int32
		wantCompatible  bool
		wantErrContains string
	}{
		{"expand migration keeps this binary", func(l int32) int32 { return l }, true, ""},
		{"contract migration does not", func(l int32) int32 { return l + 1 }, false, "needs inboxd built for schema"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			ctx := context.Background()
			st, err := migrations.Inspect(ctx, db.Pool)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Compatible() || st.Ahead() {
				t.Fatalf("freshly migrated: %+v", st)
			}
			newer := st.Latest + 1
			if _, err := db.Pool.Exec(ctx, `UPDATE `+migrations.VersionTable+` SET version = $1`, newer); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Pool.Exec(ctx, `INSERT INTO `+migrations.CompatTable+` VALUES ($1, $2)`,
				newer, tt.oldestCompat(st.Latest)); err != nil {
				t.Fatal(err)
			}
			st, err = migrations.Inspect(ctx, db.Pool)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Ahead() || st.Compatible() != tt.wantCompatible {
				t.Fatalf("state = %+v, want ahead and compatible=%v", st, tt.wantCompatible)
			}
			conn, err := pgx.Connect(ctx, db.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			res, err := migrations.Migrate(ctx, conn)
			if tt.wantCompatible {
				if err != nil || !res.Ahead || res.From != newer || res.To != newer {
					t.Fatalf("Migrate = %+v, %v; want a no-op on the newer schema", res, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErrContains) {
				t.Fatalf("Migrate = %+v, %v; want an error containing %q", res, err, tt.wantErrContains)
			}
		})
	}
}

// Every migration declares the oldest schema it keeps compatible, and
// Migrate records them all.
func TestEveryMigrationDeclaresCompatibility(t *testing.T) {
	t.Parallel()
	compat, err := migrations.Compat()
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.New(t)
	rows, err := db.Pool.Query(context.Background(), `SELECT oldest_compatible FROM `+migrations.CompatTable+` ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(compat) {
		t.Fatalf("recorded %d migrations' compatibility, want %d", len(got), len(compat))
	}
	for i := range got {
		if got[i] != compat[i] {
			t.Fatalf("migration %d: recorded %d, declared %d", i+1, got[i], compat[i])
		}
	}
}

// Inspect only reads: on a database without the schema it reports version 0
// and creates nothing (a runtime role may have no right to).
func TestInspectCreatesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t, false)
	ctx := context.Background()
	st, err := migrations.Inspect(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.Current != 0 || st.Err() == nil {
		t.Fatalf("empty database: %+v (err %v)", st, st.Err())
	}
	var tables int
	if err := db.Pool.QueryRow(ctx,
		`SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("Inspect created %d tables", tables)
	}
}
