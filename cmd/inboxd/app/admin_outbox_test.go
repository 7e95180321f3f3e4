package app

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// setupOutbox gives the test its own database, runs sql there (which
// inserts outbox rows), and returns the database, the outbox ids by event
// id, and the environment the commands run with.
func setupOutbox(t *testing.T, sql string) (*pgtest.DB, map[string]int64, []string) {
	t.Helper()
	db := pgtest.New(t)
	ids := insertRows(t, db, "outbox", sql)
	return db, ids, []string{"INBOXD_DATABASE_URL=" + db.URL}
}

// outboxCount counts the outbox rows matching cond.
func outboxCount(t *testing.T, db *pgtest.DB, cond string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE `+cond).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The dead rows of the tests: two destinations, two types, old and new,
// two reasons; beside them a pending and a published row.
const outboxFixture = `
	INSERT INTO outbox (destination, event_id, event_type, key, status, attempts, last_error, created_at, payload) VALUES
	  ('kafka:orders', 'd1', 'order.shipped', 'order-1', 'dead', 5, 'MESSAGE TOO LARGE: 2 MB', now() - interval '2 days', 'SECRET-PAYLOAD'),
	  ('kafka:orders', 'd2', 'order.shipped', 'order-2', 'dead', 5, 'unknown topic', now(), ''),
	  ('kafka:orders', 'd3', 'order.paid', NULL, 'dead', 3, 'Message too large', now(), ''),
	  ('nats:audit', 'd4', 'order.shipped', 'order-1', 'dead', 1, 'no responders', now(), ''),
	  ('kafka:orders', 'p1', 'order.shipped', 'order-1', 'pending', 0, NULL, now() - interval '10 minutes', ''),
	  ('kafka:orders', 'pub1', 'order.shipped', 'order-1', 'published', 1, NULL, now(), '')`

func TestOutboxStats(t *testing.T) {
	t.Parallel()
	db, _, env := setupOutbox(t, outboxFixture+`;
		UPDATE outbox_shards SET owner = 'relay-a', token = 7, expires_at = now() + interval '30 seconds' WHERE shard < 20;
		INSERT INTO outbox_relays VALUES ('relay-a', now()), ('relay-gone', now() - interval '10 minutes')`)

	code, out, stderr := runMain(t, env, "outbox", "stats", "--json")
	if code != 0 {
		t.Fatalf("outbox stats: %d %s", code, stderr)
	}
	var rep outboxStatsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Rows["pending"] != 1 || rep.Rows["dead"] != 4 || len(rep.Rows) != 2 || rep.PublishedEstimate != -1 ||
		rep.OldestPendingAgeSeconds < 590 || rep.OldestPendingAgeSeconds > 660 {
		t.Errorf("stats = %+v (before ANALYZE: no published estimate)", rep)
	}
	if len(rep.Destinations) != 2 || rep.Destinations[0].Destination != "kafka:orders" || rep.Destinations[0].Pending != 1 ||
		rep.Destinations[0].Dead != 3 || rep.Destinations[1].Destination != "nats:audit" || rep.Destinations[1].Dead != 1 {
		t.Errorf("destinations = %+v", rep.Destinations)
	}
	if len(rep.Shards) != 1 || rep.Shards[0].Owner != "relay-a" || rep.Shards[0].Shards != 20 || rep.UnownedShards != 12 ||
		rep.RelaysAlive != 1 || len(rep.Relays) != 2 {
		t.Errorf("shards and relays = %+v %d %+v %d", rep.Shards, rep.UnownedShards, rep.Relays, rep.RelaysAlive)
	}

	if _, err := db.Pool.Exec(context.Background(), `ANALYZE outbox`); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runMain(t, env, "outbox", "stats")
	for _, w := range []string{"pending    1\n", "dead       4\n", "published  ~1  (not counted", "oldest pending row: 10m",
		"kafka:orders  1        10m", "nats:audit    0        -               1", "relay-a      20", "(nobody)     12",
		"relays alive:       1 of 2 (seen within the minute): relay-a"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("outbox stats lacks %q:\n%s", w, out)
		}
	}
}

func TestOutboxDead(t *testing.T) {
	t.Parallel()
	_, ids, env := setupOutbox(t, outboxFixture)
	list := func(args ...string) []outboxDeadRow {
		t.Helper()
		code, out, stderr := runMain(t, env, append([]string{"outbox", "dead", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("outbox dead %q: %d %s", args, code, stderr)
		}
		var rows []outboxDeadRow
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l == "" {
				continue
			}
			var r outboxDeadRow
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, r)
		}
		return rows
	}
	events := func(rows []outboxDeadRow) string {
		var es []string
		for _, r := range rows {
			es = append(es, r.EventID)
		}
		return strings.Join(es, ",")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "d4,d3,d2,d1"}, // newest first, dead only
		{[]string{"--destination", "kafka:orders"}, "d3,d2,d1"},
		{[]string{"--type", "order.shipped"}, "d4,d2,d1"},
		{[]string{"--since", "24h"}, "d4,d3,d2"},
		{[]string{"--error", "too LARGE"}, "d3,d1"},
		{[]string{"--error", "too large", "--type", "order.shipped"}, "d1"},
		{[]string{"--limit", "1"}, "d4"},
		{[]string{"--destination", "nats:nowhere"}, ""},
	} {
		if got := events(list(c.args...)); got != c.want {
			t.Errorf("outbox dead %q = %s, want %s", c.args, got, c.want)
		}
	}
	rows := list("--type", "order.paid")
	if len(rows) != 1 || rows[0].ID != ids["d3"] || rows[0].Key != nil || rows[0].Attempts != 3 || rows[0].LastError != "Message too large" ||
		rows[0].Destination != "kafka:orders" || rows[0].CreatedAt.IsZero() {
		t.Errorf("outbox dead row = %+v", rows)
	}

	code, out, _ := runMain(t, env, "outbox", "dead")
	for _, w := range []string{"ID", "DESTINATION", "KEY", "LAST_ERROR", "order-1", "MESSAGE TOO LARGE: 2 MB", "nats:audit"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("outbox dead table lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "SECRET-PAYLOAD") {
		t.Error("outbox dead shows a payload")
	}
	for _, args := range [][]string{{"--limit", "0"}, {"--since", "soon"}, {"--since", "1h", "--until", "2h"}} {
		if code, _, _ := runMain(t, env, append([]string{"outbox", "dead"}, args...)...); code != ExitUsage {
			t.Errorf("outbox dead %q: exit %d, want %d", args, code, ExitUsage)
		}
	}
}

func TestOutboxShow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var textID, binID int64
	if err := db.Pool.QueryRow(ctx, `
		INSERT INTO outbox (destination, event_id, event_type, key, headers, payload, status, attempts, last_error)
		VALUES ('kafka:orders', 'ev-1', 'order.shipped', 'order-7', '{"traceparent":"00-abc-def-01"}', '{"id": 7}', 'dead', 5, 'too large')
		RETURNING id`).Scan(&textID); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, `INSERT INTO outbox (destination, event_id, event_type, payload) VALUES ('nats:a', 'ev-2', 't', $1) RETURNING id`,
		[]byte{0, 1, 0xff, 0x1b, '['}).Scan(&binID); err != nil {
		t.Fatal(err)
	}
	// An event id that looks like a row id, and one that two rows carry.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (destination, event_id, event_type) VALUES
		('nats:a', '424242', 't'), ('nats:a', 'twice', 't'), ('nats:b', 'twice', 't')`); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL}

	for _, arg := range []string{itoa(textID), "ev-1"} {
		code, out, stderr := runMain(t, env, "outbox", "show", arg)
		if code != 0 {
			t.Fatalf("outbox show %s: %d %s", arg, code, stderr)
		}
		for _, w := range []string{"destination:   kafka:orders", "event_id:      ev-1", "status:        dead", "attempts:      5",
			"last_error:    too large", "published_at:  -", "shard:", "key:           \"order-7\"", "  traceparent: 00-abc-def-01",
			"payload (9 bytes, UTF-8 text):\n{\"id\": 7}\n"} {
			if !strings.Contains(out, w) {
				t.Errorf("outbox show %s lacks %q:\n%s", arg, w, out)
			}
		}
	}
	code, out, _ := runMain(t, env, "outbox", "show", itoa(binID))
	if code != 0 || !strings.Contains(out, "payload (5 bytes, not UTF-8 text: hex dump") || !strings.Contains(out, "00 01 ff 1b 5b") ||
		strings.ContainsRune(out, 0x1b) || !strings.Contains(out, "key:           -") {
		t.Errorf("outbox show of a binary payload:\n%q", out)
	}
	code, out, _ = runMain(t, env, "outbox", "show", "--json", "424242")
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); code != 0 || err != nil || obj["event_id"] != "424242" {
		t.Errorf("outbox show --json of an event id with no such row id: %d %v %s", code, err, out)
	}
	code, out, _ = runMain(t, env, "outbox", "show", "twice")
	if code != 0 || strings.Count(out, "event_id:      twice") != 2 || !strings.Contains(out, "2 rows have the event id twice") {
		t.Errorf("outbox show of a shared event id:\n%s", out)
	}
	if code, _, stderr := runMain(t, env, "outbox", "show", "nope"); code != ExitFailure || !strings.Contains(stderr, "no row with id or event id nope") {
		t.Errorf("outbox show of no row: %d %s", code, stderr)
	}
	for _, args := range [][]string{{"outbox", "show"}, {"outbox", "show", "1", "2"}, {"outbox"}, {"outbox", "nope"}} {
		if code, _, _ := runMain(t, env, args...); code != ExitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, ExitUsage)
		}
	}
}

func TestOutboxRequeue(t *testing.T) {
	t.Parallel()
	db, ids, env := setupOutbox(t, outboxFixture)
	state := func(event string) (st string, attempts int, dueNow bool, lastError *string) {
		t.Helper()
		if err := db.Pool.QueryRow(context.Background(), `
			SELECT status, attempts, available_at BETWEEN now() - interval '1 minute' AND now(), last_error
			FROM outbox WHERE event_id = $1`, event).Scan(&st, &attempts, &dueNow, &lastError); err != nil {
			t.Fatal(err)
		}
		return
	}

	if code, _, stderr := runMain(t, env, "outbox", "requeue"); code != ExitUsage || !strings.Contains(stderr, "say which dead rows") {
		t.Fatalf("outbox requeue without a filter: %d %s", code, stderr)
	}
	code, out, stderr := runMain(t, env, "outbox", "requeue", "--error", "too large", "--dry-run")
	if code != 0 || !strings.Contains(out, "would requeue 2 dead outbox rows\n") ||
		!strings.Contains(out, "would requeue id "+itoa(ids["d1"])+": kafka:orders d1 order.shipped, key order-1, 5 attempts, last error: MESSAGE TOO LARGE: 2 MB") ||
		outboxCount(t, db, "status = 'dead'") != 4 {
		t.Fatalf("dry run: %d\n%s%s", code, out, stderr)
	}

	code, out, stderr = runMain(t, env, "outbox", "requeue", "--destination", "kafka:orders", "--type", "order.shipped",
		"--id", itoa(ids["d1"])+","+itoa(ids["d2"])+","+itoa(ids["d4"])+","+itoa(ids["pub1"])+",424242")
	if code != 0 {
		t.Fatalf("outbox requeue: %d\n%s%s", code, out, stderr)
	}
	for _, w := range []string{
		"id " + itoa(ids["d4"]) + `: dead, but its destination is "nats:audit", not "kafka:orders"`,
		"id " + itoa(ids["pub1"]) + ": published, not dead", "id 424242: no such row", "requeued 2 dead outbox rows\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("outbox requeue output lacks %q:\n%s", w, out)
		}
	}
	for _, e := range []string{"d1", "d2"} {
		if st, attempts, due, lastErr := state(e); st != "pending" || attempts != 0 || !due || lastErr == nil || *lastErr == "" {
			t.Errorf("%s after requeue: %s, %d attempts, due now %v, last_error %v; want pending, 0, true, kept", e, st, attempts, due, lastErr)
		}
	}
	if st, attempts, _, _ := state("d4"); st != "dead" || attempts != 1 {
		t.Errorf("d4 (not matched) is %s with %d attempts", st, attempts)
	}
	if code, out, _ := runMain(t, env, "outbox", "requeue", "--id", itoa(ids["d1"])); code != ExitFailure ||
		!strings.Contains(out, "pending, not dead") || !strings.Contains(out, "requeued 0 dead outbox rows") {
		t.Errorf("requeue of a pending row: %d %s", code, out)
	}
	if code, out, _ := runMain(t, env, "outbox", "requeue", "--all"); code != 0 || !strings.Contains(out, "requeued 2 dead outbox rows") ||
		outboxCount(t, db, "status = 'dead'") != 0 {
		t.Errorf("requeue --all: %d %s", code, out)
	}
}

func TestOutboxDiscard(t *testing.T) {
	t.Parallel()
	db, ids, env := setupOutbox(t, outboxFixture)

	if code, _, stderr := runMain(t, env, "outbox", "discard"); code != ExitUsage || !strings.Contains(stderr, "say which dead rows") {
		t.Fatalf("outbox discard without a filter: %d %s", code, stderr)
	}
	// Logged whatever the log level.
	code, out, stderr := runMain(t, append(env, "INBOXD_LOG_LEVEL=error"), "outbox", "discard", "--destination", "kafka:orders", "--dry-run")
	if code != 0 || !strings.Contains(out, "would discard 3 dead outbox rows") || outboxCount(t, db, "true") != 6 {
		t.Fatalf("dry run: %d\n%s%s", code, out, stderr)
	}
	if !strings.Contains(stderr, `"dry_run":true`) || !strings.Contains(stderr, `"would_discard":3`) {
		t.Errorf("dry run log: %s", stderr)
	}

	code, out, stderr = runMain(t, env, "outbox", "discard", "--until", "24h", "--id", itoa(ids["d1"])+","+itoa(ids["p1"]))
	if code != 0 || !strings.Contains(out, "id "+itoa(ids["p1"])+": pending, not dead") || !strings.Contains(out, "discarded 1 dead outbox row\n") {
		t.Fatalf("discard: %d\n%s%s", code, out, stderr)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(stderr)), &line); err != nil {
		t.Fatalf("discard logged %q: %v", stderr, err)
	}
	if line["command"] != "outbox discard" || line["discarded"] != float64(1) || line["until"] == nil || line["level"] != "info" {
		t.Errorf("discard log line: %v", line)
	}
	if strings.Contains(stderr+out, "SECRET-PAYLOAD") {
		t.Error("discard showed a payload")
	}
	if outboxCount(t, db, "true") != 5 || outboxCount(t, db, "event_id = 'd1'") != 0 {
		t.Fatalf("after discard: %d rows", outboxCount(t, db, "true"))
	}
	if code, out, _ := runMain(t, env, "outbox", "discard", "--error", "no such reason"); code != ExitFailure ||
		!strings.Contains(out, "discarded 0 dead outbox rows") {
		t.Errorf("discard of nothing: %d %s", code, out)
	}
	if code, out, _ := runMain(t, env, "outbox", "discard", "--all"); code != 0 || !strings.Contains(out, "discarded 3 dead outbox rows") ||
		outboxCount(t, db, "true") != 2 {
		t.Errorf("discard --all: %d %s", code, out)
	}
}

// requeue and discard go through the dead rows failedBatch ids at a time,
// each batch its own statement: a run that fails in its third batch leaves
// the first two batches done and every other row untouched, says so, and a
// second run does the rest. Pending and published rows between them are
// never touched.
func TestOutboxRequeueAndDiscardWorkInBatches(t *testing.T) {
	t.Parallel()
	const dead = 3*failedBatch + 500
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO outbox (destination, event_id, event_type, key, status, attempts, last_error)
		SELECT 'kafka:orders', 'e' || g, 't', 'k' || (g % 10),
		       CASE WHEN g % 3 = 0 THEN 'published' WHEN g % 3 = 1 THEN 'dead' ELSE 'pending' END,
		       CASE WHEN g % 3 = 1 THEN 4 ELSE 1 END, CASE WHEN g % 3 = 1 THEN 'refused' END
		FROM generate_series(1, $1::int) AS g`, 3*dead); err != nil {
		t.Fatal(err)
	}
	// The 2,500th dead row cannot be requeued until the trigger goes.
	if _, err := db.Pool.Exec(ctx, `
		CREATE FUNCTION refuse_requeue() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
		CREATE TRIGGER refuse_requeue BEFORE UPDATE ON outbox FOR EACH ROW
		    WHEN (OLD.event_id = 'e' || (3 * 2499 + 1)) EXECUTE FUNCTION refuse_requeue()`); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL}

	code, out, stderr := runMain(t, env, "outbox", "requeue", "--all", "--dry-run")
	if code != 0 || !strings.Contains(out, "would requeue "+itoa(dead)+" dead outbox rows\n") ||
		strings.Count(out, "would requeue id") != dead || outboxCount(t, db, "status = 'dead'") != dead {
		t.Fatalf("dry run: %d, %d lines\n%s", code, strings.Count(out, "\n"), stderr)
	}

	code, out, stderr = runMain(t, env, "outbox", "requeue", "--all")
	if code != ExitFailure || !strings.Contains(out, "requeued 2000 dead outbox rows before stopping") ||
		!strings.Contains(stderr, "stopped after 2000 rows, which stay requeued; run the command again for the rest") {
		t.Fatalf("requeue stopped by the trigger: %d\n%s%s", code, out, stderr)
	}
	if n := outboxCount(t, db, "status = 'pending' AND attempts = 0"); n != 2000 {
		t.Fatalf("%d rows requeued by the stopped run, want the first two batches, 2000", n)
	}
	if _, err := db.Pool.Exec(ctx, `DROP TRIGGER refuse_requeue ON outbox`); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runMain(t, env, "outbox", "requeue", "--all")
	if code != 0 || !strings.Contains(out, "requeued "+itoa(dead-2000)+" dead outbox rows\n") {
		t.Fatalf("second requeue: %d\n%s%s", code, out, stderr)
	}
	if outboxCount(t, db, "status = 'dead'") != 0 || outboxCount(t, db, "status = 'pending' AND attempts = 0") != dead ||
		outboxCount(t, db, "status = 'published'") != dead || outboxCount(t, db, "status = 'pending' AND attempts = 1") != dead {
		t.Fatal("requeue touched rows other than the dead ones")
	}

	if _, err := db.Pool.Exec(ctx, `UPDATE outbox SET status = 'dead' WHERE status = 'pending' AND attempts = 0`); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runMain(t, env, "outbox", "discard", "--all")
	if code != 0 || !strings.Contains(out, "discarded "+itoa(dead)+" dead outbox rows\n") || outboxCount(t, db, "true") != 2*dead {
		t.Fatalf("discard: %d\n%s%s", code, out, stderr)
	}
}

// A pending row that must never be published (one the relay keeps
// failing on, one written by mistake) is discarded with --pending, named
// by --id, which it needs; --dry-run lists it; a dead row given with it is
// said not to be pending. The key's later rows are then free to go.
func TestOutboxDiscardPending(t *testing.T) {
	t.Parallel()
	db, ids, env := setupOutbox(t, outboxFixture+`;
		INSERT INTO outbox (destination, event_id, event_type, key, status, attempts, last_error, payload) VALUES
		  ('nats:audit', 'p2', 'order.shipped', 'order-9', 'pending', 3, 'nats: header name "bad name"', 'SECRET-PAYLOAD')`)
	for _, args := range [][]string{{"--pending"}, {"--pending", "--all"}, {"--pending", "--destination", "nats:audit"}} {
		code, _, stderr := runMain(t, env, append([]string{"outbox", "discard"}, args...)...)
		if code != ExitUsage || !strings.Contains(stderr, "--pending needs --id") {
			t.Errorf("outbox discard %v: %d %s, want a usage error asking for --id", args, code, stderr)
		}
	}
	p2 := itoa(ids["p2"])
	code, out, stderr := runMain(t, env, "outbox", "discard", "--pending", "--id", p2, "--dry-run")
	if code != 0 || !strings.Contains(out, "would discard id "+p2+": nats:audit p2 order.shipped, key order-9, 3 attempts") ||
		!strings.Contains(out, "would discard 1 pending outbox row\n") || outboxCount(t, db, "event_id = 'p2'") != 1 {
		t.Fatalf("dry run: %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runMain(t, env, "outbox", "discard", "--pending", "--id", p2+","+itoa(ids["d1"]))
	if code != 0 || !strings.Contains(out, "id "+itoa(ids["d1"])+": dead, not pending") || !strings.Contains(out, "discarded 1 pending outbox row\n") {
		t.Fatalf("discard --pending: %d\n%s%s", code, out, stderr)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(stderr)), &line); err != nil {
		t.Fatalf("discard logged %q: %v", stderr, err)
	}
	if line["command"] != "outbox discard" || line["status"] != "pending" || line["discarded"] != float64(1) {
		t.Errorf("discard log line: %v", line)
	}
	if strings.Contains(stderr+out, "SECRET-PAYLOAD") {
		t.Error("discard showed a payload")
	}
	if outboxCount(t, db, "event_id = 'p2'") != 0 || outboxCount(t, db, "event_id IN ('p1', 'd1')") != 2 {
		t.Errorf("after discard --pending: p2 %d rows, p1 and d1 %d rows; want 0 and 2",
			outboxCount(t, db, "event_id = 'p2'"), outboxCount(t, db, "event_id IN ('p1', 'd1')"))
	}
}
