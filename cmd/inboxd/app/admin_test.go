package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/migrations"
)

// stats shows the gauges' figures (live statuses, stale rows, oldest
// received and due rows) and the schema version, and no processed count.
func TestStatsShowsTheGaugeFigures(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	insertRows(t, db, "inbox", `
		INSERT INTO inbox (source, event_id, event_type, status, attempts, received_at, available_at, last_error) VALUES
		  ('s', 'a', 't', 'dead', 10, now(), now(), 'x'),
		  ('s', 'b', 't', 'dead', 3, now(), now(), 'x'),
		  ('s', 'c', 't', 'rejected', 0, now(), now(), 'x'),
		  ('s', 'd', 't', 'processed', 1, now(), now(), NULL),
		  ('s', 'e', 't', 'received', 0, now() - interval '2 hours', now() - interval '90 seconds', NULL),
		  ('s', 'f', 't', 'received', 2, now() - interval '3 hours', now() + interval '1 hour', NULL),
		  ('s', 'g', 't', 'received', 0, now(), now(), NULL);
		UPDATE inbox SET status = 'processing', lease_token = 1, lease_expires_at = now() + interval '1 minute' WHERE event_id = 'g'`)
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_STALE_AFTER=1h"}

	code, out, stderr := runMain(t, env, "stats", "--json")
	if code != 0 {
		t.Fatalf("stats: %d %s", code, stderr)
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"received": 2, "processing": 1, "dead": 2, "rejected": 1}
	if !reflect.DeepEqual(rep.Rows, want) {
		t.Errorf("rows = %v, want %v (no processed count)", rep.Rows, want)
	}
	latest := int32(len(must(migrations.Compat())))
	if rep.StaleRows != 2 || rep.StaleAfterSeconds != 3600 ||
		rep.OldestReceivedAgeSeconds < 3*3600-60 || rep.OldestReceivedAgeSeconds > 3*3600+60 || // backoff included
		rep.OldestReadyAgeSeconds < 80 || rep.OldestReadyAgeSeconds > 150 ||
		rep.SchemaVersion != latest || rep.LatestSchemaVersion != latest || !rep.SchemaCompatible || rep.SchemaAhead {
		t.Errorf("stats = %+v", rep)
	}
	code, out, _ = runMain(t, env, "stats")
	for _, w := range []string{"dead        2", "stale       2  (received more than 1h0m0s ago)", "oldest received row: 3h", "up to date"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("stats table lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "processed") {
		t.Errorf("stats counts processed rows:\n%s", out)
	}

	empty := pgtest.NewEmpty(t, false)
	code, _, stderr = runMain(t, []string{"INBOXD_DATABASE_URL=" + empty.URL}, "stats")
	if code != ExitFailure || !strings.Contains(stderr, "run `inboxd migrate` first") {
		t.Errorf("stats on an empty database: %d %s", code, stderr)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestShow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	binary := []byte{0, 1, 2, 0xff, 'a', 0x1b, '['}
	long := bytes.Repeat([]byte("ab"), showTextLimit) // twice the limit
	var textID, binID, longID int64
	err := db.Pool.QueryRow(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, key, payload, headers, last_error, kafka_topic, kafka_partition, kafka_offset)
		VALUES ('orders', 'ev-1', 'order.created', 'dead', 'key-1', '{"sku":"A-1"}',
		        '{"content-type":"application/json","trace":{"base64":"AP8="}}', 'http 422: bad sku', 'orders', 3, 42)
		RETURNING id`).Scan(&textID)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `INSERT INTO inbox (source, event_id, event_type, key, payload) VALUES ('s', 'ev-2', 't', $1, $1) RETURNING id`,
		binary).Scan(&binID); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('s', 'ev-3', 't', $1) RETURNING id`,
		long).Scan(&longID); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL}

	code, out, stderr := runMain(t, env, "show", itoa(textID))
	if code != 0 {
		t.Fatalf("show: %d %s", code, stderr)
	}
	for _, w := range []string{"id:", "source:            orders", "event_type:        order.created", "status:            dead",
		"last_error:        http 422: bad sku", "kafka_partition:   3", "kafka_offset:      42", "processed_at:      -",
		"started:           false", "received_at:", "key:               \"key-1\"",
		"  content-type: application/json", "  trace:        base64 AP8= (not UTF-8 text",
		"payload (13 bytes, UTF-8 text):\n{\"sku\":\"A-1\"}\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("show lacks %q:\n%s", w, out)
		}
	}

	// Flags after the id, too; JSON with the payload in base64.
	code, out, _ = runMain(t, env, "show", itoa(binID), "--json")
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); code != 0 || err != nil {
		t.Fatalf("show --json: %d %v\n%s", code, err, out)
	}
	if obj["payload"] != base64.StdEncoding.EncodeToString(binary) || obj["key"] != base64.StdEncoding.EncodeToString(binary) ||
		obj["event_id"] != "ev-2" || obj["status"] != "received" || obj["processed_at"] != nil {
		t.Errorf("show --json = %v", obj)
	}
	if _, ok := obj["updated_at"]; !ok {
		t.Errorf("show --json lacks updated_at: %v", obj)
	}

	// Binary payloads are a hex dump; nothing raw reaches the terminal.
	code, out, _ = runMain(t, env, "show", itoa(binID))
	if code != 0 || !strings.Contains(out, "payload (7 bytes, not UTF-8 text: hex dump") ||
		!strings.Contains(out, "00 01 02 ff 61 1b 5b") || strings.ContainsRune(out, 0x1b) || strings.ContainsRune(out, 0) {
		t.Errorf("show of a binary payload:\n%q", out)
	}

	// Long payloads are cut unless --full.
	code, out, _ = runMain(t, env, "show", itoa(longID))
	if code != 0 || !strings.Contains(out, "… 4096 bytes more (--full prints the whole payload)") || strings.Contains(out, string(long)) {
		t.Errorf("show of a long payload: not cut (%d bytes of output)", len(out))
	}
	code, out, _ = runMain(t, env, "show", "--full", itoa(longID))
	if code != 0 || !strings.Contains(out, string(long)+"\n") || strings.Contains(out, "more (--full") {
		t.Errorf("show --full of a long payload: cut (%d bytes of output)", len(out))
	}

	if code, _, stderr := runMain(t, env, "show", "9999"); code != ExitFailure || !strings.Contains(stderr, "no row with id 9999") {
		t.Errorf("show of no row: %d %s", code, stderr)
	}
	if code, _, stderr := runMain(t, env, "show", "x"); code != ExitFailure || !strings.Contains(stderr, "neither a row id nor an event id") {
		t.Errorf("show x: %d %s", code, stderr)
	}
	for _, args := range [][]string{{"show"}, {"show", "1", "2"}} {
		if code, _, _ := runMain(t, env, args...); code != ExitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, ExitUsage)
		}
	}
}

func TestDiscard(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ids := insertRows(t, db, "inbox", `
		INSERT INTO inbox (source, event_id, event_type, status, last_error, payload, updated_at) VALUES
		  ('s', 'd1', 'order.created', 'dead', 'x', 'SECRET-PAYLOAD', now() - interval '2 days'),
		  ('s', 'd2', 'order.created', 'dead', 'x', '', now()),
		  ('s', 'd3', 'invoice.sent', 'dead', 'x', '', now()),
		  ('s', 'r1', '', 'rejected', 'x', '', now()),
		  ('s', 'p1', 'order.created', 'processed', NULL, '', now())`)
	env := []string{"INBOXD_DATABASE_URL=" + db.URL}
	count := func() (n int) {
		t.Helper()
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if code, _, stderr := runMain(t, env, "discard"); code != ExitUsage || !strings.Contains(stderr, "say which dead rows") {
		t.Fatalf("discard without a filter: %d %s", code, stderr)
	}
	// Logged whatever the log level.
	code, out, stderr := runMain(t, append(env, "INBOXD_LOG_LEVEL=error"), "discard", "--type", "order.created", "--dry-run")
	if code != 0 || !strings.Contains(out, "would discard 2 dead rows") || count() != 5 {
		t.Fatalf("dry run: %d\n%s%s", code, out, stderr)
	}
	if !strings.Contains(stderr, `"dry_run":true`) || !strings.Contains(stderr, `"would_discard":2`) {
		t.Errorf("dry run log: %s", stderr)
	}

	code, out, stderr = runMain(t, env, "discard", "--type", "order.created", "--until", "24h",
		"--id", itoa(ids["d1"])+","+itoa(ids["p1"])+",424242")
	if code != 0 {
		t.Fatalf("discard: %d\n%s%s", code, out, stderr)
	}
	for _, w := range []string{"id " + itoa(ids["p1"]) + ": processed, not dead", "id 424242: no such row", "discarded 1 dead row\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("discard output lacks %q:\n%s", w, out)
		}
	}
	// One structured line with the filter and the count, and no payload.
	var logLines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", l, err)
		}
		logLines = append(logLines, m)
	}
	if len(logLines) != 1 {
		t.Fatalf("discard logged %d lines, want 1:\n%s", len(logLines), stderr)
	}
	l := logLines[0]
	if l["command"] != "discard" || l["status"] != "dead" || l["event_type"] != "order.created" || l["discarded"] != float64(1) ||
		l["until"] == nil || !strings.Contains(l["filter"].(string), "--type") || l["level"] != "info" {
		t.Errorf("discard log line: %v", l)
	}
	if strings.Contains(stderr, "SECRET-PAYLOAD") || strings.Contains(out, "SECRET-PAYLOAD") {
		t.Error("discard showed a payload")
	}
	if count() != 4 {
		t.Fatalf("%d rows left, want 4", count())
	}

	if code, out, _ := runMain(t, env, "discard", "--id", itoa(ids["r1"])); code != ExitFailure ||
		!strings.Contains(out, "rejected, not dead (use --status rejected)") {
		t.Errorf("discard of a rejected row as dead: %d %s", code, out)
	}
	if code, out, _ := runMain(t, env, "discard", "--status", "rejected", "--all"); code != 0 || !strings.Contains(out, "discarded 1 rejected row") {
		t.Errorf("discard --status rejected: %d %s", code, out)
	}
	if code, out, _ := runMain(t, env, "discard", "--status", "rejected", "--all"); code != ExitFailure || !strings.Contains(out, "discarded 0 rejected rows") {
		t.Errorf("discard of nothing: %d %s", code, out)
	}
	if count() != 3 {
		t.Fatalf("%d rows left, want 3 (d2, d3, p1)", count())
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	insertRows(t, db, "inbox", `
		INSERT INTO inbox (source, event_id, event_type, status, processed_at, updated_at, last_error) VALUES
		  ('s', 'old-1', 't', 'processed', now() - interval '10 days', now() - interval '10 days', NULL),
		  ('s', 'old-2', 't', 'processed', now() - interval '8 days', now() - interval '8 days', NULL),
		  ('s', 'new', 't', 'processed', now() - interval '1 day', now() - interval '1 day', NULL),
		  ('s', 'dead-old', 't', 'dead', NULL, now() - interval '40 days', 'x'),
		  ('s', 'rejected-old', '', 'rejected', NULL, now() - interval '40 days', 'x'),
		  ('s', 'dead-new', 't', 'dead', NULL, now(), 'x')`)
	count := func() (n int) {
		t.Helper()
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL}

	code, out, stderr := runMain(t, env, "prune", "--dry-run")
	if code != 0 || !strings.Contains(out, "would prune 2 processed rows (processed more than 168h0m0s ago, INBOXD_RETENTION) and no dead or rejected rows (kept: INBOXD_DEAD_RETENTION is 0)") || count() != 6 {
		t.Fatalf("prune --dry-run: %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runMain(t, append(env, "INBOXD_DEAD_RETENTION=720h"), "prune", "--dry-run")
	if code != 0 || !strings.Contains(out, "would prune 2 processed rows") || !strings.Contains(out, "and 2 dead/rejected rows (failed more than 720h0m0s ago") || count() != 6 {
		t.Fatalf("prune --dry-run with dead retention: %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runMain(t, append(env, "INBOXD_DEAD_RETENTION=720h"), "prune")
	if code != 0 || !strings.Contains(out, "pruned 2 processed rows") || !strings.Contains(out, "and 2 dead/rejected rows") {
		t.Fatalf("prune: %d\n%s%s", code, out, stderr)
	}
	if count() != 2 {
		t.Fatalf("%d rows left, want 2 (new, dead-new)", count())
	}
}

// help lists every command with its flags and every variable Load reads,
// from the same tables the dispatch and Load use.
func TestHelpListsEveryCommandAndVariable(t *testing.T) {
	t.Parallel()
	code, out, _ := runMain(t, nil, "help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	for _, c := range []string{"run [--migrate]", "migrate [--river]", "stats [--json] [-o FORMAT]",
		"dead [--after CURSOR] [--error TEXT] [--json] [--key KEY] [--limit N] [-o FORMAT] [--route TYPE] [--since TIME] [--source SOURCE] [--status STATUS] [--type TYPE] [--until TIME]",
		"show [--full] [--json] [-o FORMAT] [--source SOURCE] ID|EVENT_ID",
		"cancel [--all] [--by NAME] [--dry-run] [--error TEXT] [--id IDS] [--key KEY] [--reason TEXT] [--route TYPE] [--since TIME] [--source SOURCE] [--status STATUS] [--type TYPE] [--until TIME]",
		"audit [--action ACTION] [--before ID] [--json] [--limit N] [-o FORMAT] [--operator NAME] [--since TIME]", "completion SHELL", "requeue [--all] [--by NAME] [--drop-duplicates] [--dry-run] [--error TEXT] [--id IDS] [--key KEY] [--route TYPE] [--since TIME] [--source SOURCE] [--status STATUS] [--type TYPE] [--until TIME]",
		"discard [--all] [--by NAME] [--dry-run] [--error TEXT] [--id IDS] [--key KEY] [--route TYPE] [--since TIME] [--source SOURCE] [--status STATUS] [--type TYPE] [--until TIME]", "prune [--dry-run]", "help", "version"} {
		if !strings.Contains(out, "inboxd "+c+"\n") {
			t.Errorf("help lacks the command line %q", "inboxd "+c)
		}
	}
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		name, _, _ := strings.Cut(ct.Field(i).Tag.Get("env"), ",")
		if !strings.HasPrefix(name, "INBOXD_") {
			continue
		}
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				line = l
			}
		}
		if line == "" {
			t.Errorf("help does not list %s", name)
			continue
		}
		if def := ct.Field(i).Tag.Get("envDefault"); def != "" && !strings.Contains(line, " "+def+" ") {
			t.Errorf("help line of %s lacks its default %q: %q", name, def, line)
		}
	}
	if !strings.Contains(out, "INBOXD_LEASE") || !strings.Contains(out, "30s") {
		t.Error("help lacks INBOXD_LEASE's default")
	}
	// Every command's own -h exits 0 and shows its flags.
	for _, c := range commands {
		code, _, stderr := runMain(t, nil, c.name, "-h")
		if code != 0 || !strings.Contains(stderr, "inboxd "+c.name) {
			t.Errorf("%s -h: exit %d\n%s", c.name, code, stderr)
		}
	}
	if code, _, stderr := runMain(t, nil); code != ExitUsage || !strings.Contains(stderr, "requeue") || !strings.Contains(stderr, "inboxd help") {
		t.Errorf("no command: %d\n%s", code, stderr)
	}
}

// Unknown INBOXD_* variables are warned about, for every command, without
// failing it.
func TestUnknownVariablesWarn(t *testing.T) {
	t.Parallel()
	env := []string{"INBOXD_ROUTE=routes.yaml", "INBOXD_TEST_DATABASE_URL=x", "INBOXD_FAULT=1", "INBOXD_DEMO_DATABASE_URL=x"}
	code, out, stderr := runMain(t, env, "version")
	if code != 0 || !strings.HasPrefix(out, "inboxd ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if stderr != "inboxd: warning: INBOXD_ROUTE is not an inboxd variable and is ignored; did you mean INBOXD_ROUTES?\n" {
		t.Errorf("stderr = %q", stderr)
	}
	code, _, stderr = runMain(t, append(env, "INBOXD_WORKERS=0"), "stats")
	if code != ExitUsage || !strings.Contains(stderr, "inboxd: warning: INBOXD_ROUTE") || !strings.Contains(stderr, "inboxd: INBOXD_WORKERS: must be") {
		t.Errorf("stats with a bad configuration: %d\n%s", code, stderr)
	}
}

// A bad duration and an out-of-range number are reported together.
func TestConfigurationErrorsAllAtOnce(t *testing.T) {
	t.Parallel()
	code, _, stderr := runMain(t, []string{"INBOXD_LEASE=5", "INBOXD_WORKERS=0", "INBOXD_POLL_INTERVAL=soon"}, "requeue", "--all")
	want := "inboxd: INBOXD_LEASE: not a duration (use Go syntax such as 250ms, 30s, 5m)\n" +
		"inboxd: INBOXD_POLL_INTERVAL: not a duration (use Go syntax such as 250ms, 30s, 5m)\n" +
		"inboxd: INBOXD_DATABASE_URL: is required (or set INBOXD_DATABASE_URL_FILE)\n" +
		"inboxd: INBOXD_WORKERS: must be between 1 and 10000, got 0\n"
	if code != ExitUsage || stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", code, stderr, want)
	}
}

// migrate uses INBOXD_MIGRATE_DATABASE_URL when it is set; the other
// commands never do.
func TestMigrateUsesTheMigratorURL(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t, false)
	env := []string{"INBOXD_DATABASE_URL=postgres://nobody@127.0.0.1:1/nowhere", "INBOXD_MIGRATE_DATABASE_URL=" + db.URL}
	code, out, stderr := runMain(t, env, "migrate")
	if code != 0 || !strings.Contains(out, "schema migrated from version 0 to") {
		t.Fatalf("migrate: %d %s %s", code, out, stderr)
	}
	if code, _, stderr := runMain(t, env, "stats"); code != ExitFailure || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("stats must use INBOXD_DATABASE_URL: %d %s", code, stderr)
	}
}

// `inboxd prune` keeps, as the daemon's retention does, the expired dead
// rows that hold their key back: INBOXD_ROUTES says which routes block.
func TestPruneKeepsDeadRowsThatBlockTheirKey(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ids := insertRows(t, db, "inbox", `
		INSERT INTO inbox (source, event_id, event_type, key, status, updated_at, last_error) VALUES
		  ('s', 'blk-dead', 'blk', 'k', 'dead', now() - interval '40 days', 'x'),
		  ('s', 'skp-dead', 'skp', 'k', 'dead', now() - interval '40 days', 'x'),
		  ('s', 'other-dead', 't', 'k', 'dead', now() - interval '40 days', 'x');
		INSERT INTO inbox (source, event_id, event_type, key) VALUES ('s', 'blk-next', 'blk', 'k')`)
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, []byte(`routes:
  - type: blk
    handler: ignore
    ordered: true
  - type: skp
    handler: ignore
    ordered: true
    on_dead: skip
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_DEAD_RETENTION=720h", "INBOXD_ROUTES=" + routes}
	code, out, stderr := runMain(t, env, "prune", "--dry-run")
	if code != 0 || !strings.Contains(out, "and 2 dead/rejected rows") {
		t.Fatalf("prune --dry-run: %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runMain(t, env, "prune")
	if code != 0 || !strings.Contains(out, "and 2 dead/rejected rows") {
		t.Fatalf("prune: %d\n%s%s", code, out, stderr)
	}
	if s := stateOf(t, db, ids["blk-dead"]); s.Status != "dead" {
		t.Errorf("the blocking dead head is %s after prune, want kept dead", s.Status)
	}
}
