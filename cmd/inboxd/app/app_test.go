package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runMain(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = Main(ctx, args, env, &out, &errOut, Options{})
	return code, out.String(), errOut.String()
}

func TestBadConfigurationNamesTheVariable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  []string
		want []string // one error line each, the error field of a JSON line
	}{
		{"missing database", nil, []string{"INBOXD_DATABASE_URL: is required"}},
		{"bad duration", []string{"INBOXD_DATABASE_URL=postgres://x@h/db", "INBOXD_LEASE=5"},
			[]string{"INBOXD_LEASE: not a duration"}},
		{"several bad values", []string{"INBOXD_DATABASE_URL=postgres://x@h/db", "INBOXD_WORKERS=0", "INBOXD_BACKOFF_BASE=2s", "INBOXD_BACKOFF_MAX=1s"},
			[]string{"INBOXD_WORKERS: must be between 1 and 10000, got 0", "INBOXD_BACKOFF_MAX: must be at least INBOXD_BACKOFF_BASE"}},
		{"brokers without topics", []string{"INBOXD_DATABASE_URL=postgres://x@h/db", "INBOXD_KAFKA_BROKERS=k:9092"},
			[]string{"INBOXD_KAFKA_TOPICS: is required when INBOXD_KAFKA_BROKERS is set"}},
		{"secret not echoed", []string{"INBOXD_DATABASE_URL=postgres://u:hunter2@h:notaport/db"},
			[]string{"INBOXD_DATABASE_URL: is not a valid PostgreSQL connection string"}},
		{"bad routes file", []string{"INBOXD_DATABASE_URL=postgres://x@127.0.0.1:1/db", "INBOXD_ROUTES=/nonexistent/routes.yaml"},
			[]string{"INBOXD_ROUTES:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runMain(t, tt.env, "run")
			if code != ExitUsage {
				t.Fatalf("exit code = %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
			}
			lines := errorLines(stderr)
			for _, want := range tt.want {
				found := false
				for _, l := range lines {
					if strings.HasPrefix(l, want) {
						found = true
					}
				}
				if !found {
					t.Errorf("no line starting %q in:\n%s", want, stderr)
				}
			}
			if strings.Contains(stderr, "hunter2") {
				t.Errorf("password leaked into the error output:\n%s", stderr)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	if code, out, _ := runMain(t, nil, "version"); code != 0 || !strings.HasPrefix(out, "inboxd ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, stderr := runMain(t, nil, "frobnicate"); code != ExitUsage || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: %d %q", code, stderr)
	}
	if code, _, _ := runMain(t, nil); code != ExitUsage {
		t.Fatalf("no command: exit %d", code)
	}
}

// run refuses a database whose schema is behind, and `run --migrate` or
// `migrate` fixes it; a cancelled run exits 0.
func TestMigrateAndRun(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t, false)
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, []byte("default: ignore\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_HTTP_ADDR=", "INBOXD_ROUTES=" + routes}

	code, _, stderr := runMain(t, env, "run")
	if code != ExitFailure || !strings.Contains(stderr, "run `inboxd migrate` first") {
		t.Fatalf("run on an empty database: exit %d, stderr:\n%s", code, stderr)
	}
	code, out, stderr := runMain(t, env, "migrate")
	if code != 0 || !strings.Contains(out, "schema migrated from version 0 to") {
		t.Fatalf("migrate: exit %d, out %q, stderr %q", code, out, stderr)
	}
	code, out, _ = runMain(t, env, "migrate")
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: exit %d, out %q", code, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errOut syncbuf.Buffer
	go func() { done <- Main(ctx, []string{"run"}, env, &bytes.Buffer{}, &errOut, Options{}) }()
	waitForLog(t, &errOut, `"message":"running"`)
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run exit code after cancellation = %d; logs:\n%s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
	if strings.Contains(errOut.String(), db.URL) {
		t.Fatal("the database URL appears in the logs")
	}
}

// The migrations tune autovacuum for the inbox, and run warns when
// autovacuum will not vacuum it (here: switched off for the table).
func TestRunWarnsWhenTheInboxIsNotVacuumed(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var opts []string
	if err := db.Pool.QueryRow(ctx, `SELECT reloptions FROM pg_class WHERE oid = 'inbox'::regclass`).Scan(&opts); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(opts, "autovacuum_vacuum_scale_factor=0.01") {
		t.Errorf("inbox storage parameters %v, want autovacuum_vacuum_scale_factor=0.01", opts)
	}
	if _, err := db.Pool.Exec(ctx, `ALTER TABLE inbox SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, []byte("default: ignore\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_HTTP_ADDR=", "INBOXD_ROUTES=" + routes}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	var errOut syncbuf.Buffer
	go func() { done <- Main(runCtx, []string{"run"}, env, &bytes.Buffer{}, &errOut, Options{}) }()
	waitForLog(t, &errOut, `"message":"running"`)
	cancel()
	<-done
	if !strings.Contains(errOut.String(), `"inbox_autovacuum_enabled":false`) ||
		!strings.Contains(errOut.String(), "autovacuum will not vacuum the inbox") {
		t.Errorf("no warning about the unvacuumed inbox; logs:\n%s", errOut.String())
	}
}

func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error) VALUES
		  ('s', 'a', 'order.created', 'dead', 10, 'http 422 Unprocessable Entity: bad sku'),
		  ('s', 'b', 'order.created', 'dead', 3, 'no'),
		  ('s', 'c', 'invoice.sent', 'dead', 1, 'no handler for event type "invoice.sent"'),
		  ('s', 'd', '', 'rejected', 0, 'missing event type (headers event_type, ce_type)'),
		  ('s', 'e', 'order.created', 'processed', 1, NULL),
		  ('s', 'f', 'order.created', 'received', 0, NULL)`); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL}

	code, out, _ := runMain(t, env, "dead", "--type", "order.created", "--json")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "bad sku") {
		t.Fatalf("dead --type: %d\n%s", code, out)
	}
	code, out, _ = runMain(t, env, "dead", "--status", "rejected")
	if code != 0 || !strings.Contains(out, "missing event type") {
		t.Fatalf("dead --status rejected: %d\n%s", code, out)
	}

	if code, _, stderr := runMain(t, env, "requeue"); code != ExitUsage || !strings.Contains(stderr, "--all") {
		t.Fatalf("requeue without selector: %d %s", code, stderr)
	}
	code, out, _ = runMain(t, env, "requeue", "--type", "order.created")
	if code != 0 || !strings.Contains(out, "requeued 2 dead rows") {
		t.Fatalf("requeue --type: %d %s", code, out)
	}
	var status string
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT status, attempts FROM inbox WHERE event_id = 'a'`).Scan(&status, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != "received" || attempts != 0 {
		t.Fatalf("requeued row: %s/%d", status, attempts)
	}
	var id int64
	if err := db.Pool.QueryRow(ctx, `SELECT id FROM inbox WHERE event_id = 'c'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runMain(t, env, "requeue", "--id", "999999,"+itoa(id))
	if code != 0 || !strings.Contains(out, "requeued 1 dead row\n") || !strings.Contains(out, "id 999999: no such row") {
		t.Fatalf("requeue --id: %d %s", code, out)
	}
	// Rejected rows are not requeued by --all: only dead ones; nothing
	// matched is a failure.
	code, out, _ = runMain(t, env, "requeue", "--all")
	if code != ExitFailure || !strings.Contains(out, "requeued 0 dead rows") {
		t.Fatalf("requeue --all: %d %s", code, out)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// waitForLog waits up to 30s for needle in buf, failing t with the logs.
func waitForLog(t *testing.T, buf *syncbuf.Buffer, needle string) {
	t.Helper()
	testkit.WaitForReport(t, 30*time.Second, func() (bool, string) {
		logs := buf.String()
		return strings.Contains(logs, needle), needle + " in the logs:\n" + logs
	})
}
