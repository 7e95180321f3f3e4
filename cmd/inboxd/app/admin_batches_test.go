package app

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
)

// cancelOnWrite is a log writer that cancels a command's context when a
// line containing needle is written: an operator pressing Ctrl-C mid-way,
// at a known point.
type cancelOnWrite struct {
	syncbuf.Buffer
	needle string
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if bytes.Contains(p, []byte(w.needle)) {
		w.cancel()
	}
	return n, err
}

// countWhere counts the inbox rows matching cond.
func countWhere(t *testing.T, db *pgtest.DB, cond string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE `+cond).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// runInterrupted runs the command with its context cancelled at the first
// log line containing needle.
func runInterrupted(t *testing.T, env []string, needle string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := &cancelOnWrite{needle: needle, cancel: cancel}
	var out bytes.Buffer
	code = Main(ctx, args, env, &out, w, Options{})
	return code, out.String(), w.String()
}

// The report: `requeue --all` was one UPDATE, so a backlog bigger
// than what one statement can change within statement_timeout could never
// be requeued (a million rows: cancelled after 5 s with nothing requeued).
// Measured here: one UPDATE of 300,000 dead rows takes 3 s, three times
// the 1 s statement timeout this test sets. Batches of their own get
// through, log their progress, and an interrupted run leaves every row
// either requeued whole or untouched, for a second run to finish.
func TestRequeueAllWorksInBatchesUnderAShortStatementTimeout(t *testing.T) {
	const total = 300_000
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error, updated_at)
		SELECT 's', 'e' || g, CASE WHEN g % 100000 = 7 THEN 'rare' ELSE 'order.created' END, 'dead', 3, 'boom',
		       now() - interval '1 hour'
		FROM generate_series(1, $1::int) AS g`, total); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_STATEMENT_TIMEOUT=1s"}

	// The dry run's count is right, and reads within the timeout.
	code, out, stderr := runMain(t, env, "requeue", "--type", "rare", "--dry-run")
	if code != ExitOK || !strings.Contains(out, "would requeue 3 dead rows\n") || strings.Count(out, "would requeue id") != 3 {
		t.Fatalf("requeue --type rare --dry-run: exit %d\n%s%s", code, out, stderr)
	}

	// Interrupted at its first progress line.
	code, out, stderr = runInterrupted(t, env, "requeue progress", "requeue", "--all")
	requeued := countWhere(t, db, "status = 'received'")
	t.Logf("interrupted run: exit %d, %d rows requeued\n%s%s", code, requeued, out, stderr)
	if code == ExitOK || requeued == 0 || requeued == total {
		t.Fatalf("interrupted requeue --all: exit %d with %d of %d rows requeued; want a failure mid-way\n%s%s",
			code, requeued, total, out, stderr)
	}
	if !strings.Contains(stderr, "run the command again") {
		t.Errorf("the interrupted run does not say it can be resumed:\n%s", stderr)
	}
	// Consistent: every row is either requeued whole or untouched.
	if n := countWhere(t, db, "NOT ((status = 'received' AND attempts = 0 AND NOT started AND lease_token IS NULL AND updated_at > now() - interval '1 minute')"+
		" OR (status = 'dead' AND attempts = 3 AND updated_at < now() - interval '1 minute'))"); n != 0 {
		t.Fatalf("%d rows are neither requeued nor untouched", n)
	}

	// A second run picks up the rest, and only the rest.
	code, out, stderr = runMain(t, env, "requeue", "--all")
	if code != ExitOK || !strings.Contains(out, "requeued "+itoa(int64(total-requeued))+" dead rows\n") {
		t.Fatalf("second requeue --all: exit %d, want %d rows requeued\n%s%s", code, total-requeued, out, stderr)
	}
	if !strings.Contains(stderr, "requeue progress") {
		t.Errorf("no progress line on stderr:\n%s", stderr)
	}
	if n := countWhere(t, db, "status = 'received' AND attempts = 0"); n != total {
		t.Fatalf("%d of %d rows requeued after the second run", n, total)
	}
}

// As for requeue, for discard: one DELETE marks rows only, which is fast
// (300,000 rows in 0.27 s here), so the test makes one dead row in 30 take
// a millisecond to delete (a trigger): one statement over the 100,000 rows
// needs over 3 s against the 1 s timeout, a batch of 1,000 about 40 ms.
func TestDiscardAllWorksInBatchesUnderAShortStatementTimeout(t *testing.T) {
	const total = 100_000
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error)
		SELECT 's', 'e' || g, 'order.created', 'dead', 3, 'boom' FROM generate_series(1, $1::int) AS g`, total); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `
		CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.001); RETURN OLD; END $$;
		CREATE TRIGGER slow_delete BEFORE DELETE ON inbox FOR EACH ROW
		    WHEN (OLD.id % 30 = 0) EXECUTE FUNCTION slow_delete()`); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_STATEMENT_TIMEOUT=1s"}

	code, out, stderr := runInterrupted(t, env, "discard progress", "discard", "--all")
	left := countWhere(t, db, "true")
	t.Logf("interrupted run: exit %d, %d rows left\n%s%s", code, left, out, stderr)
	if code == ExitOK || left == 0 || left == total {
		t.Fatalf("interrupted discard --all: exit %d with %d of %d rows left; want a failure mid-way\n%s%s",
			code, left, total, out, stderr)
	}
	if !strings.Contains(stderr, "run the command again") {
		t.Errorf("the interrupted run does not say it can be resumed:\n%s", stderr)
	}
	if n := countWhere(t, db, "NOT (status = 'dead' AND attempts = 3)"); n != 0 {
		t.Fatalf("%d rows left that are not the untouched dead rows", n)
	}

	code, out, stderr = runMain(t, env, "discard", "--all")
	if code != ExitOK || !strings.Contains(out, "discarded "+itoa(int64(left))+" dead rows\n") {
		t.Fatalf("second discard --all: exit %d, want %d rows discarded\n%s%s", code, left, out, stderr)
	}
	if n := countWhere(t, db, "true"); n != 0 {
		t.Fatalf("%d rows left after the second run", n)
	}
}

// Item 14b of the issue: `discard` of the dead head of a key on an ordered
// `on_dead: block` route left the next row of the key parked
// (available_at 9999-12-31) until the sweeper ran, every tenth rescue
// round (150 s by default). The discard unparks it in its own transaction.
// And `requeue` of such a head leaves its successor parked behind it, to
// run after it.
func TestDiscardOfABlockingHeadUnparksTheKey(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ids := insertRows(t, db, "inbox", `
		INSERT INTO inbox (source, event_id, event_type, key, status, attempts, last_error, available_at) VALUES
		  ('s', 'k1-dead',   'order.step', 'k1', 'dead',     3, 'boom', now()),
		  ('s', 'k1-next',   'order.step', 'k1', 'received', 0, NULL,   '9999-12-31 00:00:00+00'),
		  ('s', 'k1-after',  'order.step', 'k1', 'received', 0, NULL,   '9999-12-31 00:00:00+00'),
		  ('s', 'k2-dead',   'order.step', 'k2', 'dead',     3, 'boom', now()),
		  ('s', 'k2-next',   'order.step', 'k2', 'received', 0, NULL,   '9999-12-31 00:00:00+00'),
		  ('s', 'k3-canary', 'order.step', 'k3', 'received', 0, NULL,   '9999-12-31 00:00:00+00')`)

	var mu sync.Mutex
	var ran []string
	reg := handlers.NewRegistry()
	if err := reg.HandleFunc("order.step", func(_ context.Context, ev *handlers.Event) error {
		mu.Lock()
		ran = append(ran, ev.EventID)
		mu.Unlock()
		return nil
	}, handlers.Ordered(handlers.OnDeadBlock)); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_HTTP_ADDR="}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	var errOut syncbuf.Buffer
	go func() { done <- Main(runCtx, []string{"run"}, env, &bytes.Buffer{}, &errOut, Options{Registry: reg}) }()
	t.Cleanup(func() { cancel(); <-done })
	status := func(eventID string) string {
		var s string
		if err := db.Pool.QueryRow(ctx, `SELECT status FROM inbox WHERE event_id = $1`, eventID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	waitStatus := func(eventID, want string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for status(eventID) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s is %s after %s, want %s; logs:\n%s", eventID, status(eventID), within, want, errOut.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The sweeper's first pass, at start, unparks the canary (it waits for
	// nothing) and leaves the rows behind the dead heads parked; the next
	// pass is 150 s away.
	waitStatus("k3-canary", "processed", 30*time.Second)
	if n := countWhere(t, db, "event_id IN ('k1-next', 'k1-after', 'k2-next') AND available_at = '9999-12-31 00:00:00+00'"); n != 3 {
		t.Fatalf("setup: %d rows parked behind the dead heads, want 3", n)
	}

	code, out, stderr := runMain(t, []string{"INBOXD_DATABASE_URL=" + db.URL}, "discard", "--id", itoa(ids["k1-dead"]))
	if code != ExitOK || !strings.Contains(out, "discarded 1 dead row\n") {
		t.Fatalf("discard: exit %d\n%s%s", code, out, stderr)
	}
	if n := countWhere(t, db, "event_id = 'k1-next' AND available_at <= now()"); n != 1 && status("k1-next") == "received" {
		t.Fatalf("the row behind the discarded head is still parked")
	}
	// The key goes on, in order, without the sweeper.
	waitStatus("k1-after", "processed", 10*time.Second)

	code, out, stderr = runMain(t, []string{"INBOXD_DATABASE_URL=" + db.URL}, "requeue", "--id", itoa(ids["k2-dead"]))
	if code != ExitOK || !strings.Contains(out, "requeued 1 dead row\n") {
		t.Fatalf("requeue: exit %d\n%s%s", code, out, stderr)
	}
	waitStatus("k2-next", "processed", 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	byKey := make(map[string][]string)
	for _, e := range ran {
		byKey[e[:2]] = append(byKey[e[:2]], e)
	}
	if got := strings.Join(byKey["k1"], ","); got != "k1-next,k1-after" {
		t.Errorf("key k1 ran %s, want the two rows behind the discarded head, in order", got)
	}
	if got := strings.Join(byKey["k2"], ","); got != "k2-dead,k2-next" {
		t.Errorf("key k2 ran %s, want the requeued head, then the row behind it", got)
	}
}

// Rejected rows are re-mapped one by one, read a batch at a time: every
// one of more than a batch is re-mapped, once.
func TestRequeueRejectedWorksInBatches(t *testing.T) {
	t.Parallel()
	const total = failedBatch + 3
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(context.Background(), `
		INSERT INTO inbox (source, event_id, event_type, status, headers, last_error, kafka_topic, kafka_partition, kafka_offset)
		SELECT 'orders', 'orders/0/' || g, '', 'rejected', jsonb_build_object('event_id', 'ev-' || g, 'kind', 'order.created'),
		       'missing event type', 'orders', 0, g
		FROM generate_series(1, $1::int) AS g`, total); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_EVENT_TYPE_HEADERS=event_type,kind"}
	code, out, stderr := runMain(t, env, "requeue", "--status", "rejected", "--all")
	if want := "requeued " + itoa(total) + " of " + itoa(total) + " rejected rows\n"; code != ExitOK || !strings.HasSuffix(out, want) {
		t.Fatalf("requeue --status rejected --all: exit %d, want %q\n%s%s", code, want, lastLines(out, 3), stderr)
	}
	if n := countWhere(t, db, "status = 'received' AND event_type = 'order.created' AND event_id = 'ev-' || kafka_offset"); n != total {
		t.Fatalf("%d of %d rejected rows re-mapped", n, total)
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
