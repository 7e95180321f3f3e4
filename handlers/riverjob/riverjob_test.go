package riverjob

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/pgtest"
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func riverTables(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_class WHERE relname LIKE 'river\_%' AND relkind IN ('r', 'p')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// CheckSchema finds a missing schema without creating anything; Migrate
// applies every River migration once, and is then a no-op.
func TestMigrateAndCheckSchema(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := pgtest.New(t)

	err := CheckSchema(ctx, db.Pool)
	if !errors.Is(err, ErrSchemaMissing) || !strings.Contains(err.Error(), "run `inboxd migrate --river`") {
		t.Fatalf("CheckSchema on a database without River: %v", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("the error is not one line: %q", err)
	}
	if n := riverTables(t, db.Pool); n != 0 {
		t.Fatalf("CheckSchema created %d tables", n)
	}

	res, err := Migrate(ctx, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != 0 || res.To < 6 || len(res.Applied) != res.To || res.Applied[0] != 1 || !slices.IsSorted(res.Applied) {
		t.Fatalf("first Migrate: %+v", res)
	}
	if err := CheckSchema(ctx, db.Pool); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
	again, err := Migrate(ctx, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.From != res.To || again.To != res.To || len(again.Applied) != 0 {
		t.Fatalf("second Migrate: %+v, after %+v", again, res)
	}

	// Half a schema is out of date, and says so.
	if _, err := db.Pool.Exec(ctx, `DELETE FROM river_migration WHERE version = (SELECT max(version) FROM river_migration)`); err != nil {
		t.Fatal(err)
	}
	if err := CheckSchema(ctx, db.Pool); !errors.Is(err, ErrSchemaMissing) {
		t.Fatalf("CheckSchema with the last migration missing: %v", err)
	}
}

// Migrators started together (replicas' init containers) serialise on the
// lock: every migration is applied once and none fails.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := pgtest.New(t)
	const n = 4
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied []int
		errs    []error
	)
	for range n {
		wg.Go(func() {
			pool, err := pgxpool.New(ctx, db.URL)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer pool.Close()
			res, err := Migrate(ctx, pool, nil)
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
			applied = append(applied, res.Applied...)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(applied)
	if len(applied) == 0 || len(slices.Compact(slices.Clone(applied))) != len(applied) {
		t.Fatalf("versions applied: %v (each must be applied exactly once)", applied)
	}
}

func TestMigrateNeedsTwoConnections(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := Migrate(testContext(t), pool, nil); err == nil || !strings.Contains(err.Error(), "at least 2 connections") {
		t.Fatalf("Migrate on a one-connection pool: %v", err)
	}
}

type jobRow struct {
	Kind        string
	Queue       string
	Priority    int
	MaxAttempts int
	State       string
	Args        []byte
}

func jobsFor(t *testing.T, pool *pgxpool.Pool, eventID string) []jobRow {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT kind, queue, priority, max_attempts, state::text, args FROM river_job WHERE args->>'event_id' = $1 ORDER BY id`, eventID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []jobRow
	for rows.Next() {
		var r jobRow
		if err := rows.Scan(&r.Kind, &r.Queue, &r.Priority, &r.MaxAttempts, &r.State, &r.Args); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// InsertJob writes the route's job in the caller's transaction: kind,
// queue, priority and max attempts from the route (River's defaults for
// zero values), the event as args; a rolled-back transaction leaves no job.
func TestInsertJob(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := pgtest.New(t)
	if _, err := Migrate(ctx, db.Pool, nil); err != nil {
		t.Fatal(err)
	}
	ins, err := New(db.Pool, Config{})
	if err != nil {
		t.Fatal(err)
	}
	insert := func(job handlers.Job, ev *handlers.Event, commit bool) error {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := ins.InsertJob(ctx, tx, job, ev); err != nil {
			return err
		}
		if commit {
			return tx.Commit(ctx)
		}
		return nil
	}

	ev := &handlers.Event{ID: 1, Source: "payments", EventID: "pay-1", EventType: "payment.captured",
		Key: []byte("order-7"), Payload: []byte(`{"amount": 10}`)}
	if err := insert(handlers.Job{Kind: "payment_captured"}, ev, true); err != nil {
		t.Fatal(err)
	}
	got := jobsFor(t, db.Pool, "pay-1")
	if len(got) != 1 {
		t.Fatalf("jobs for pay-1: %+v", got)
	}
	j := got[0]
	if j.Kind != "payment_captured" || j.Queue != "default" || j.Priority != 1 || j.MaxAttempts != 25 || j.State != "available" {
		t.Fatalf("job with River's defaults: %+v", j)
	}
	var args paymentCaptured
	if err := json.Unmarshal(j.Args, &args); err != nil {
		t.Fatal(err)
	}
	if args.EventID != "pay-1" || args.EventType != "payment.captured" || args.Source != "payments" ||
		string(args.Key) != "order-7" || !jsonEqual(t, args.PayloadBytes(), ev.Payload) || args.PayloadBase64 != nil {
		t.Fatalf("args %s decode to %+v", j.Args, args)
	}

	ev2 := &handlers.Event{ID: 2, Source: "payments", EventID: "pay-2", EventType: "payment.captured", Payload: []byte{0xff, 0}}
	if err := insert(handlers.Job{Kind: "payment_captured", Queue: "payments", Priority: 3, MaxAttempts: 7}, ev2, true); err != nil {
		t.Fatal(err)
	}
	got = jobsFor(t, db.Pool, "pay-2")
	if len(got) != 1 || got[0].Queue != "payments" || got[0].Priority != 3 || got[0].MaxAttempts != 7 {
		t.Fatalf("job with the route's settings: %+v", got)
	}
	args = paymentCaptured{}
	if err := json.Unmarshal(got[0].Args, &args); err != nil {
		t.Fatal(err)
	}
	if string(args.PayloadBytes()) != "\xff\x00" || args.Payload != nil || args.Key != nil {
		t.Fatalf("binary payload's args %s decode to %+v", got[0].Args, args)
	}

	ev3 := &handlers.Event{ID: 3, Source: "payments", EventID: "pay-3", EventType: "payment.captured", Payload: []byte(`{}`)}
	if err := insert(handlers.Job{Kind: "payment_captured"}, ev3, false); err != nil {
		t.Fatal(err)
	}
	if got := jobsFor(t, db.Pool, "pay-3"); len(got) != 0 {
		t.Fatalf("a rolled-back transaction left jobs: %+v", got)
	}

	// A job River cannot take is a permanent error, before any SQL.
	err = insert(handlers.Job{Kind: "payment_captured", Queue: "Not A Queue"}, ev3, true)
	if !handlers.IsPermanent(err) || !strings.Contains(err.Error(), "queue: ") {
		t.Fatalf("bad queue: %v", err)
	}
	if got := jobsFor(t, db.Pool, "pay-3"); len(got) != 0 {
		t.Fatalf("a refused job was inserted: %+v", got)
	}
}

// Without River's tables the insert fails, retryably, naming the fix.
func TestInsertJobWithoutRiverSchema(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := pgtest.New(t)
	ins, err := New(db.Pool, Config{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	err = ins.InsertJob(ctx, tx, handlers.Job{Kind: "payment_captured"}, &handlers.Event{EventID: "x", Payload: []byte(`{}`)})
	if err == nil || handlers.IsPermanent(err) || !strings.Contains(err.Error(), "run `inboxd migrate --river`") {
		t.Fatalf("insert without River's schema: %v", err)
	}
}

// A river route with batch: inserts one job per event with one
// InsertJobs (InsertManyTx) in the batch's transaction: all of them on
// commit, none on rollback.
func TestInsertJobs(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := pgtest.New(t)
	if _, err := Migrate(ctx, db.Pool, nil); err != nil {
		t.Fatal(err)
	}
	ins, err := New(db.Pool, Config{})
	if err != nil {
		t.Fatal(err)
	}
	evs := []*handlers.Event{
		{ID: 1, Source: "payments", EventID: "many-1", EventType: "payment.captured", Payload: []byte(`{"n": 1}`)},
		{ID: 2, Source: "payments", EventID: "many-2", EventType: "payment.captured", Payload: []byte{0xff}},
		{ID: 3, Source: "payments", EventID: "many-3", EventType: "payment.captured", Payload: []byte(`{"n": 3}`)},
	}
	reg, err := handlers.NewRegistryFromRoutes(&handlers.Routes{Routes: []handlers.RouteConfig{
		{Type: "payment.captured", Handler: "river", Kind: "payment_captured", Queue: "payments", Priority: 2,
			Batch: handlers.Batch{MaxRows: 10}},
	}}, handlers.RegisterOptions{Jobs: ins})
	if err != nil {
		t.Fatal(err)
	}
	route := reg.Lookup("payment.captured").Batch
	for _, commit := range []bool{false, true} {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := route.HandleBatchTx(ctx, tx, evs); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			got := jobsFor(t, db.Pool, ev.EventID)
			want := 0
			if commit {
				want = 1
			}
			if len(got) != want {
				t.Fatalf("commit %v: %d jobs for %s, want %d", commit, len(got), ev.EventID, want)
			}
			if commit && (got[0].Queue != "payments" || got[0].Priority != 2 || got[0].Kind != "payment_captured") {
				t.Fatalf("job for %s: %+v", ev.EventID, got[0])
			}
		}
	}
}
