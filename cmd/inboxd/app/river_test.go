package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
)

const riverRoutes = `routes:
  - type: payment.captured
    handler: river
    kind: payment_captured
`

func writeRiverRoutes(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// errorLines returns the errors a daemon command logged on stderr (the
// error field of its JSON lines at level error), one per line.
func errorLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var e struct{ Level, Error string }
		if json.Unmarshal([]byte(l), &e) == nil && e.Level == "error" {
			out = append(out, e.Error)
		}
	}
	return out
}

func riverTableCount(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_class WHERE relname LIKE 'river\_%' AND relkind IN ('r', 'p')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// `migrate --river` applies inboxd's migrations and River's, on
// INBOXD_MIGRATE_DATABASE_URL when set, says what it did, and is then a
// no-op; plain `migrate` leaves River alone.
func TestMigrateRiver(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t, false)
	env := []string{"INBOXD_DATABASE_URL=postgres://nobody@127.0.0.1:1/nowhere", "INBOXD_MIGRATE_DATABASE_URL=" + db.URL}

	code, out, stderr := runMain(t, env, "migrate")
	if code != 0 || strings.Contains(out, "River") || riverTableCount(t, db) != 0 {
		t.Fatalf("plain migrate: exit %d, out %q, stderr %q, River tables %d", code, out, stderr, riverTableCount(t, db))
	}
	code, out, stderr = runMain(t, env, "migrate", "--river")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "schema is up to date at version") ||
		!strings.HasPrefix(lines[1], "River schema migrated from version 0 to ") || !strings.Contains(lines[1], "(applied 1, 2, ") {
		t.Fatalf("migrate --river: exit %d, out %q, stderr %q", code, out, stderr)
	}
	var to int
	if _, err := fmt.Sscanf(lines[1], "River schema migrated from version 0 to %d", &to); err != nil {
		t.Fatal(err)
	}
	var recorded int
	if err := db.Pool.QueryRow(context.Background(), `SELECT max(version) FROM river_migration`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != to {
		t.Fatalf("River's migration table is at %d, the report says %d", recorded, to)
	}
	code, out, stderr = runMain(t, env, "migrate", "--river")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("River schema is up to date at version %d\n", to)) {
		t.Fatalf("second migrate --river: exit %d, out %q, stderr %q", code, out, stderr)
	}
}

// `run` with a river route and no River schema exits 2 with one line
// naming the fix, and creates nothing.
func TestRunRefusesRiverRoutesWithoutRiverSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_HTTP_ADDR=", "INBOXD_ROUTES=" + writeRiverRoutes(t, riverRoutes)}
	code, _, stderr := runMain(t, env, "run")
	lines := errorLines(stderr)
	if code != ExitUsage || len(lines) != 1 || !strings.Contains(lines[0], "run `inboxd migrate --river`") {
		t.Fatalf("exit %d, want %d with one line saying to run `inboxd migrate --river`; stderr:\n%s", code, ExitUsage, stderr)
	}
	if n := riverTableCount(t, db); n != 0 {
		t.Fatalf("run created %d River tables", n)
	}
}

// A river route whose job River would refuse is a start-up error naming the
// file, the route and the field.
func TestRunRefusesRiverRoutesRiverCannotTake(t *testing.T) {
	t.Parallel()
	routes := writeRiverRoutes(t, riverRoutes+`  - type: refund.issued
    handler: river
    kind: refund_issued
    queue: Refunds Queue
`)
	// Routes come first, so the database is never reached.
	env := []string{"INBOXD_DATABASE_URL=postgres://nobody@127.0.0.1:1/nowhere", "INBOXD_HTTP_ADDR=", "INBOXD_ROUTES=" + routes}
	code, _, stderr := runMain(t, env, "run")
	lines := errorLines(stderr)
	want := fmt.Sprintf(`INBOXD_ROUTES: %s: route 2 (type "refund.issued"): queue: "Refunds Queue" is not a River queue name`, routes)
	if code != ExitUsage || len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
		t.Fatalf("exit %d, want %d and one line starting %q; stderr:\n%s", code, ExitUsage, want, stderr)
	}
}

// When the database does not answer at start-up, River's schema cannot be
// checked: run says so and waits for the database like any other start.
func TestRunWithRiverRoutesBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	env := []string{"INBOXD_DATABASE_URL=postgres://nobody@127.0.0.1:1/nowhere", "INBOXD_HTTP_ADDR=",
		"INBOXD_ROUTES=" + writeRiverRoutes(t, riverRoutes)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errOut syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"run"}, env, &bytes.Buffer{}, &errOut, Options{}) }()
	waitForLog(t, &errOut, "River's schema could not be checked yet")
	waitForLog(t, &errOut, "database not reachable yet")
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after cancellation; logs:\n%s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
}

// The job exists exactly when the row is processed: an insert that fails
// (a trigger on river_job refuses one event) and a mark that fails after
// the insert succeeded (a trigger on inbox refuses to mark another) both
// leave no job, and their rows end dead after their attempts; every other
// event gets exactly one job.
func TestRiverJobOnlyWithTheRowsTransaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := pgtest.New(t)
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_HTTP_ADDR=", "INBOXD_ROUTES=" + writeRiverRoutes(t, riverRoutes),
		"INBOXD_MAX_ATTEMPTS=3", "INBOXD_BACKOFF_BASE=20ms", "INBOXD_BACKOFF_MAX=50ms", "INBOXD_POLL_INTERVAL=50ms"}
	if code, out, stderr := runMain(t, env, "migrate", "--river"); code != 0 {
		t.Fatalf("migrate --river: exit %d, out %q, stderr %q", code, out, stderr)
	}
	mustExec := func(sql string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// probe counts the job inserts that mark-fails' attempts made: a
	// sequence, which a rollback does not undo.
	mustExec(`CREATE SEQUENCE probe`)
	mustExec(`CREATE FUNCTION river_job_test_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.args->>'event_id' = 'insert-fails' THEN
		RAISE EXCEPTION 'test trigger refuses the job of %', NEW.args->>'event_id';
	END IF;
	IF NEW.args->>'event_id' = 'mark-fails' THEN
		PERFORM nextval('probe');
	END IF;
	RETURN NEW;
END $$`)
	mustExec(`CREATE TRIGGER river_job_test BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION river_job_test_trigger()`)
	mustExec(`CREATE FUNCTION inbox_test_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'test trigger refuses to mark % processed', NEW.event_id;
END $$`)
	mustExec(`CREATE TRIGGER inbox_test BEFORE UPDATE ON inbox FOR EACH ROW
WHEN (NEW.status = 'processed' AND NEW.event_id = 'mark-fails') EXECUTE FUNCTION inbox_test_trigger()`)

	ids := []string{"ok-1", "insert-fails", "ok-2", "mark-fails", "ok-3"}
	for _, id := range ids {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('payments', $1, 'payment.captured', '{"n": 1}')`, id); err != nil {
			t.Fatal(err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var errOut syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- Main(runCtx, []string{"run"}, env, &bytes.Buffer{}, &errOut, Options{}) }()
	defer func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("run exit %d; logs:\n%s", code, errOut.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
	}()

	type row struct {
		status    string
		attempts  int
		lastError string
	}
	read := func(id string) row {
		t.Helper()
		var r row
		var lastError *string
		if err := db.Pool.QueryRow(ctx, `SELECT status, attempts, last_error FROM inbox WHERE event_id = $1`, id).
			Scan(&r.status, &r.attempts, &lastError); err != nil {
			t.Fatal(err)
		}
		if lastError != nil {
			r.lastError = *lastError
		}
		return r
	}
	deadline := time.Now().Add(time.Minute)
	for {
		settled := true
		for _, id := range ids {
			if s := read(id).status; s != "processed" && s != "dead" {
				settled = false
			}
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows not settled; logs:\n%s", errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	jobs := func(id string) int {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'event_id' = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, id := range []string{"ok-1", "ok-2", "ok-3"} {
		if r := read(id); r.status != "processed" || jobs(id) != 1 {
			t.Errorf("%s: %+v with %d jobs, want processed with 1", id, r, jobs(id))
		}
	}
	for id, why := range map[string]string{
		"insert-fails": "test trigger refuses the job of insert-fails",
		"mark-fails":   "test trigger refuses to mark mark-fails processed",
	} {
		r := read(id)
		if r.status != "dead" || r.attempts != 3 || !strings.Contains(r.lastError, why) {
			t.Errorf("%s: %+v, want dead after 3 attempts with %q in last_error", id, r, why)
		}
		if n := jobs(id); n != 0 {
			t.Errorf("%s: %d jobs, want none", id, n)
		}
	}
	// The insert did happen in each of mark-fails' attempts (so its job
	// was really rolled back, not never written).
	var probes int
	if err := db.Pool.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM probe`).Scan(&probes); err != nil {
		t.Fatal(err)
	}
	if probes != 3 {
		t.Errorf("mark-fails inserted its job in %d attempts, want 3", probes)
	}
	var total int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != 3 {
		t.Errorf("%d jobs in all, want 3", total)
	}
}

// A river route with batch: inserts a batch's jobs with one InsertManyTx
// in the transaction that writes the rows' outcomes. One event whose job
// River's table refuses (a trigger) fails each batch it is in: nothing of
// those batches is committed, every row of them is retried, and on its
// last attempt it runs alone and goes dead alone; every other event gets
// exactly one job.
func TestRiverBatchRouteInsertsJobsWithTheRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := pgtest.New(t)
	routes := riverRoutes + "    batch: {max_rows: 50}\n"
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_HTTP_ADDR=", "INBOXD_ROUTES=" + writeRiverRoutes(t, routes),
		"INBOXD_MAX_ATTEMPTS=3", "INBOXD_BACKOFF_BASE=20ms", "INBOXD_BACKOFF_MAX=50ms", "INBOXD_POLL_INTERVAL=50ms"}
	if code, out, stderr := runMain(t, env, "migrate", "--river"); code != 0 {
		t.Fatalf("migrate --river: exit %d, out %q, stderr %q", code, out, stderr)
	}
	for _, sql := range []string{
		`CREATE FUNCTION river_job_test_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.args->>'event_id' = 'poison' THEN
		RAISE EXCEPTION 'test trigger refuses the job of %', NEW.args->>'event_id';
	END IF;
	RETURN NEW;
END $$`,
		`CREATE TRIGGER river_job_test BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION river_job_test_trigger()`,
		`INSERT INTO inbox (source, event_id, event_type, payload)
		 SELECT 'payments', 'ev-' || i, 'payment.captured', '{"n": 1}' FROM generate_series(1, 119) AS i`,
		`INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('payments', 'poison', 'payment.captured', '{}')`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	runUntilFinished(ctx, t, db.Pool, env)
	var processed, dead, jobs, distinct, poisonAttempts int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'processed'), count(*) FILTER (WHERE status = 'dead'),
		(SELECT count(*) FROM river_job), (SELECT count(DISTINCT args->>'event_id') FROM river_job),
		(SELECT attempts FROM inbox WHERE event_id = 'poison') FROM inbox`).Scan(&processed, &dead, &jobs, &distinct, &poisonAttempts); err != nil {
		t.Fatal(err)
	}
	if processed != 119 || dead != 1 || poisonAttempts != 3 {
		t.Errorf("%d processed, %d dead (the poison row after %d attempts), want 119, 1 and 3", processed, dead, poisonAttempts)
	}
	if jobs != 119 || distinct != 119 {
		t.Errorf("%d River jobs for %d distinct events, want one each for the 119 processed", jobs, distinct)
	}
}

// runUntilFinished runs `inboxd run` with env until no row of the inbox in
// db is received or processing, then stops it, failing the test (with the
// daemon's logs) if it exits early, ctx ends first, or it exits non-zero.
func runUntilFinished(ctx context.Context, t *testing.T, db *pgxpool.Pool, env []string) {
	t.Helper()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var errOut syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- Main(runCtx, []string{"run"}, env, &bytes.Buffer{}, &errOut, Options{}) }()
	for {
		var left int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE status IN ('received', 'processing')`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("rows still unfinished; logs:\n%s", errOut.String())
		case code := <-done:
			t.Fatalf("run exited %d; logs:\n%s", code, errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; logs:\n%s", code, errOut.String())
	}
}
