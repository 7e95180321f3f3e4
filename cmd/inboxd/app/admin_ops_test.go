package app

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// opsCLI is a test database with rows of every view, and the env to run
// the CLI on it.
type opsCLI struct {
	db  *pgtest.DB
	env []string
	ids map[string]int64
}

func newOpsCLI(t *testing.T) opsCLI {
	t.Helper()
	db := pgtest.New(t)
	b := opsCLI{db: db, env: []string{"INBOXD_DATABASE_URL=" + db.URL, "USER=carol"}, ids: map[string]int64{}}
	for _, r := range []struct{ name, source, typ, set string }{
		{"retrying", "orders", "order.created", "attempts = 6, available_at = now() + interval '1 hour', last_error = 'http 503'"},
		{"waiting", "orders", "order.created", ""},
		{"processing", "orders", "order.created", "status = 'processing', attempts = 1, lease_token = 7, lease_expires_at = now() + interval '1 minute', locked_by = 'vm-1'"},
		{"processed", "orders", "order.paid", "status = 'processed', attempts = 1, processed_at = received_at + interval '2 second'"},
		{"dead-kafka", "orders", "order.created", "status = 'dead', attempts = 25, last_error = 'http 422 unprocessable'"},
		{"dead-amqp", "payments-queue", "order.created", "status = 'dead', attempts = 25, last_error = 'http 500'"},
		{"twin", "orders", "order.created", "status = 'dead', attempts = 1, last_error = 'x'"},
		{"twin", "payments-queue", "order.created", "status = 'dead', attempts = 1, last_error = 'x'"},
	} {
		var id int64
		err := db.Pool.QueryRow(context.Background(), `INSERT INTO inbox (source, event_id, event_type, key, payload)
			VALUES ($1, $2, $3, convert_to($2, 'UTF8'), 'p') RETURNING id`, r.source, r.name, r.typ).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		if r.set != "" {
			if _, err := db.Pool.Exec(context.Background(), "UPDATE inbox SET "+r.set+" WHERE id = $1", id); err != nil {
				t.Fatal(err)
			}
		}
		b.ids[r.source+"/"+r.name] = id
	}
	return b
}

func (b opsCLI) status(t *testing.T, key string) (st, lastError string) {
	t.Helper()
	var le *string
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT status, last_error FROM inbox WHERE id = $1", b.ids[key]).Scan(&st, &le); err != nil {
		return "gone", ""
	}
	if le != nil {
		lastError = *le
	}
	return st, lastError
}

// Every view lists its rows, with what it shows, as a table and as JSON
// (-o json); dead takes --source and --error.
func TestListEveryView(t *testing.T) {
	t.Parallel()
	b := newOpsCLI(t)
	for view, want := range map[string]string{
		"retrying": "orders/retrying", "waiting": "orders/waiting", "processing": "orders/processing", "processed": "orders/processed",
	} {
		code, out, stderr := runMain(t, b.env, "list", view, "-o", "json")
		if code != 0 {
			t.Fatalf("list %s: %d %s", view, code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var r listedRow
		if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &r) != nil || r.ID != b.ids[want] {
			t.Fatalf("list %s -o json: %q", view, out)
		}
		switch view {
		case "retrying":
			if r.Attempts != 6 || r.MaxAttempts != 10 || r.NextAttemptAt == nil || r.LastError != "http 503" {
				t.Errorf("retrying row: %+v", r)
			}
		case "processing":
			if r.Worker != "vm-1" || r.LeaseExpiresAt == nil {
				t.Errorf("processing row: %+v", r)
			}
		case "processed":
			if r.TookSeconds != 2 {
				t.Errorf("processed row took %v s", r.TookSeconds)
			}
		}
	}
	code, out, _ := runMain(t, b.env, "list", "retrying")
	if code != 0 || !strings.Contains(out, "NEXT_ATTEMPT") || !strings.Contains(out, "6 of 10") {
		t.Errorf("list retrying (table): %q", out)
	}
	code, out, _ = runMain(t, b.env, "dead", "--source", "payments-queue", "--error", "500", "--json")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"event_id":"dead-amqp"`) {
		t.Errorf("dead --source --error: %d %q", code, out)
	}
	if code, _, stderr := runMain(t, b.env, "list", "stale"); code != ExitUsage || !strings.Contains(stderr, "no list \"stale\"") {
		t.Errorf("list of an unknown view: %d %s", code, stderr)
	}
	code, _, stderr := runMain(t, b.env, "dead", "-o", "yaml")
	if code != ExitUsage || strings.Count(stderr, "neither table nor json") != 1 {
		t.Errorf("a bad -o: %d, the error not printed once:\n%s", code, stderr)
	}
}

// show takes an event id, and --source when several sources hold it.
func TestShowByEventID(t *testing.T) {
	t.Parallel()
	b := newOpsCLI(t)
	code, out, stderr := runMain(t, b.env, "show", "dead-kafka", "--json")
	var row map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &row) != nil || row["event_id"] != "dead-kafka" {
		t.Fatalf("show dead-kafka: %d %q %s", code, out, stderr)
	}
	code, out, stderr = runMain(t, b.env, "show", "twin")
	if code != ExitUsage || !strings.Contains(stderr, "2 sources hold event id twin") || !strings.Contains(out, "payments-queue") {
		t.Fatalf("show twin: %d %q %s", code, out, stderr)
	}
	code, out, _ = runMain(t, b.env, "show", "twin", "--source", "payments-queue", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &row) != nil || row["source"] != "payments-queue" {
		t.Fatalf("show twin --source: %d %q", code, out)
	}
	// The row's history: its attempts, oldest first.
	now := time.Now()
	if err := driver.RecordAttempts(context.Background(), b.db.Pool, "vm-7", []driver.Attempt{
		{RowID: b.ids["orders/dead-kafka"], Attempt: 1, StartedAt: now, FinishedAt: now.Add(30 * time.Millisecond), Outcome: "retried", Error: "http 503"},
		{RowID: b.ids["orders/dead-kafka"], Attempt: 2, StartedAt: now, FinishedAt: now, Outcome: "dead", Error: "http 422 unprocessable"},
	}); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runMain(t, b.env, "show", "dead-kafka")
	if code != 0 || !strings.Contains(out, "attempts (the last 25 are kept):") || !strings.Contains(out, "30ms") ||
		!strings.Contains(out, "vm-7") || !strings.Contains(out[strings.Index(out, "retried"):], "dead     http 422") {
		t.Errorf("show's history:\n%s", out)
	}
	code, out, _ = runMain(t, b.env, "show", "dead-kafka", "-o", "json")
	var withHistory struct {
		History []attemptReport `json:"history"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &withHistory) != nil || len(withHistory.History) != 2 || withHistory.History[0].DurationSeconds != 0.03 {
		t.Errorf("show -o json's history: %q", out)
	}
	if code, _, stderr := runMain(t, b.env, "show", "ord-13"); code != ExitFailure || !strings.Contains(stderr, "neither a row id nor an event id") {
		t.Fatalf("show ord-13: %d %s", code, stderr)
	}
}

// requeue, discard and cancel by --error, --source, --route and --key,
// under the operator's name; every action is in the audit trail.
func TestActionsByFilterAndAudit(t *testing.T) {
	t.Parallel()
	b := newOpsCLI(t)
	if code, out, stderr := runMain(t, b.env, "requeue", "--error", "422", "--dry-run"); code != 0 || !strings.Contains(out, "would requeue id") {
		t.Fatalf("requeue --error --dry-run: %d %q %s", code, out, stderr)
	}
	if code, _, stderr := runMain(t, b.env, "requeue", "--error", "422", "--by", "dave"); code != 0 {
		t.Fatalf("requeue --error: %d %s", code, stderr)
	}
	if st, _ := b.status(t, "orders/dead-kafka"); st != "received" {
		t.Fatalf("dead-kafka is %s", st)
	}
	if code, _, stderr := runMain(t, b.env, "discard", "--source", "payments-queue", "--key", "dead-amqp"); code != 0 {
		t.Fatalf("discard --source --key: %d %s", code, stderr)
	}
	if st, _ := b.status(t, "payments-queue/dead-amqp"); st != "gone" {
		t.Fatalf("dead-amqp is %s", st)
	}
	code, out, stderr := runMain(t, b.env, "cancel", "--route", "order.created", "--status", "received", "--error", "503", "--reason", "bad deploy")
	if code != 0 || !strings.Contains(out, "cancelled 1 row") {
		t.Fatalf("cancel: %d %q %s", code, out, stderr)
	}
	if st, le := b.status(t, "orders/retrying"); st != "dead" || le != "cancelled by carol@"+hostname(t)+": bad deploy" {
		t.Fatalf("the cancelled row: %s %q", st, le)
	}
	if code, _, _ := runMain(t, b.env, "retry", "--all"); code != ExitFailure {
		t.Errorf("retry with nothing in backoff: %d, want 1", code)
	}
	code, out, _ = runMain(t, b.env, "audit", "-o", "json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 {
		t.Fatalf("audit: %d\n%s", code, out)
	}
	var e auditReport
	if err := json.Unmarshal([]byte(lines[3]), &e); err != nil || e.Operator != "dave" || e.Action != "requeue" || e.Rows != 1 ||
		e.DryRun || !strings.Contains(string(e.Filter), `"error":"422"`) {
		t.Errorf("the requeue's entry: %+v %v", e, err)
	}
	if err := json.Unmarshal([]byte(lines[4]), &e); err != nil || !e.DryRun || e.Operator != "carol@"+hostname(t) {
		t.Errorf("the dry run's entry: %+v %v", e, err)
	}
	code, out, _ = runMain(t, b.env, "audit", "--action", "cancel")
	if code != 0 || !strings.Contains(out, "cancel") || strings.Contains(out, "requeue") {
		t.Errorf("audit --action cancel:\n%s", out)
	}
}

// Without $USER the operator is the account's name, never unknown@.
func TestOperatorNeverUnknown(t *testing.T) {
	t.Parallel()
	b := newOpsCLI(t)
	env := []string{b.env[0]}
	if code, _, stderr := runMain(t, env, "requeue", "--id", itoa(b.ids["orders/twin"])); code != 0 {
		t.Fatalf("requeue: %d %s", code, stderr)
	}
	_, out, _ := runMain(t, env, "audit", "-o", "json")
	var e auditReport
	if err := json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &e); err != nil || e.Operator == "" || strings.HasPrefix(e.Operator, "unknown") {
		t.Fatalf("operator %q (%v)", e.Operator, err)
	}
	if code, _, _ := runMain(t, append(env, "INBOXD_OPERATOR=ops-bot"), "route", "pause", "order.created"); code != 0 {
		t.Fatal("route pause")
	}
	_, out, _ = runMain(t, env, "route", "list")
	if !strings.Contains(out, "ops-bot") {
		t.Fatalf("route list: %s", out)
	}
}

// The completion scripts name every command and parse in their shell
// (bash is on every test machine).
func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, stderr := runMain(t, nil, "completion", sh)
		if code != 0 || !strings.Contains(out, "requeue") || !strings.Contains(out, map[bool]string{true: "-l error", false: "--error"}[sh == "fish"]) || !strings.Contains(out, "outbox") {
			t.Fatalf("completion %s: %d %s", sh, code, stderr)
		}
		for _, w := range []string{"reset-breaker", "limits", map[bool]string{true: "-l burst", false: "--burst"}[sh == "fish"],
			map[bool]string{true: "-l clear", false: "--clear"}[sh == "fish"]} {
			if !strings.Contains(out, w) {
				t.Errorf("completion %s lacks %s (route rate, reset-breaker, limits)", sh, w)
			}
		}
		path, err := exec.LookPath(sh)
		if err != nil {
			if sh == "bash" {
				t.Fatal("bash is not installed")
			}
			continue
		}
		cmd := exec.Command(path, "-n")
		cmd.Stdin = strings.NewReader(out)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v %s", sh, err, msg)
		}
	}
	if code, _, _ := runMain(t, nil, "completion", "tcsh"); code != ExitUsage {
		t.Errorf("completion tcsh: %d", code)
	}
}

// A bad flag is reported once.
func TestFlagErrorOnce(t *testing.T) {
	t.Parallel()
	code, _, stderr := runMain(t, []string{"INBOXD_DATABASE_URL=postgres://x@127.0.0.1:1/db"}, "requeue", "--nope")
	if code != ExitUsage || strings.Count(stderr, "flag provided but not defined: -nope") != 1 {
		t.Fatalf("%d:\n%s", code, stderr)
	}
}

func hostname(t *testing.T) string {
	t.Helper()
	op, err := cliOperator("test", "", configForHost(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, host, _ := strings.Cut(op.Name, "@")
	return host
}

func configForHost() config.Config { return config.Config{} }
