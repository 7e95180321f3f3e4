package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/worker"
)

// A row's history records its failed attempts and the attempt that
// finished it after them (worker, start, duration, outcome, error); a row
// processed at its first attempt records nothing; a row that dies records
// its last attempt as dead. Each entry is written by the completion of its
// outcome (one statement), never after its commit.
func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	calls := map[string]int{}
	if err := b.reg.HandleFunc("flaky", func(_ context.Context, ev *handlers.Event) error {
		mu.Lock()
		defer mu.Unlock()
		calls[ev.EventID]++
		if ev.EventID == "twice" && calls[ev.EventID] <= 2 {
			return errors.New("http 503")
		}
		if ev.EventID == "never" {
			return errors.New("http 500")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "flaky", "happy", "twice", "never")
	b.noteTransactions(t)
	p := b.start(t, testConfig())
	waitFor(t, 20*time.Second, "every row finished", func() bool {
		return b.countStatus(t, "processed") == 2 && b.countStatus(t, "dead") == 1
	})
	p.stop(t)
	idOf := func(eventID string) int64 {
		var id int64
		if err := b.db.Pool.QueryRow(context.Background(), "SELECT id FROM inbox WHERE event_id = $1", eventID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	history := func(eventID string) []driver.Attempt {
		h, err := driver.History(context.Background(), b.db.Pool, idOf(eventID))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := history("happy"); len(h) != 0 {
		t.Errorf("the happy row recorded %d attempts: %+v", len(h), h)
	}
	h := history("twice")
	if len(h) != 3 || h[0].Outcome != "retried" || h[1].Outcome != "retried" || h[2].Outcome != "processed" {
		t.Fatalf("twice: %+v", h)
	}
	for i, a := range h {
		if a.Attempt != i+1 || a.Worker == "" || a.StartedAt.IsZero() || a.FinishedAt.Before(a.StartedAt) {
			t.Errorf("attempt %d: %+v", i+1, a)
		}
	}
	if h[0].Error != "attempt 1 of 3: http 503" || h[2].Error != "" {
		t.Errorf("errors: %q, %q", h[0].Error, h[2].Error)
	}
	if h := history("never"); len(h) != 3 || h[2].Outcome != "dead" || h[2].Error != "attempt 3 of 3: http 500" {
		t.Errorf("never: %+v", h)
	}
	// Each entry was written by its outcome's completion, in the same
	// statement: the one commits with the other or neither does.
	entries := b.entryTransactions(t)
	for _, e := range entries {
		if e.outcome == nil || *e.outcome != e.entry {
			t.Errorf("%s: the entry's transaction %d is not its outcome's (%s)", e, e.entry, xidString(e.outcome))
		}
	}
	if len(entries) != 6 {
		t.Errorf("%d entries noted, want 6", len(entries))
	}
	// The per-route rollup counted the same outcomes (written by the
	// pool's maintenance, at the latest when it stopped).
	cells, err := driver.ReadRollup(context.Background(), b.db.Pool, driver.SpanHour, time.Now().Add(-2*time.Hour), "flaky")
	var processed, retried, dead int64
	for _, c := range cells {
		processed, retried, dead = processed+c.Processed, retried+c.Retried, dead+c.Dead
	}
	if err != nil || processed != 2 || retried != 4 || dead != 1 {
		t.Errorf("rollup: %d processed, %d retried, %d dead (%v); want 2, 4, 1", processed, retried, dead, err)
	}
}

// A row's history keeps its last driver.KeptAttempts attempts.
func TestAttemptHistoryKeepsTheLast25(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	for n := 1; n <= 30; n++ {
		err := driver.RecordAttempts(ctx, b.db.Pool, "w", []driver.Attempt{{RowID: 42, Attempt: n, StartedAt: now, FinishedAt: now, Outcome: "retried", Error: "e"}})
		if err != nil {
			t.Fatal(err)
		}
	}
	h, err := driver.History(ctx, b.db.Pool, 42)
	if err != nil || len(h) != driver.KeptAttempts || h[0].Attempt != 6 || h[24].Attempt != 30 {
		t.Fatalf("%d attempts kept (%v), from %d", len(h), err, h[0].Attempt)
	}
}

// history is the recorded attempts of the row of event eventID (source
// test), oldest first.
func (b *bundle) history(t testing.TB, eventID string) []driver.Attempt {
	t.Helper()
	var id int64
	if err := b.db.Pool.QueryRow(context.Background(),
		"SELECT id FROM inbox WHERE source = 'test' AND event_id = $1", eventID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	h, err := driver.History(context.Background(), b.db.Pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// outcomesOf is the outcomes of h, in order.
func outcomesOf(h []driver.Attempt) []string {
	out := make([]string, len(h))
	for i, a := range h {
		out[i] = a.Outcome
	}
	return out
}

// The rescuer writes each started attempt it ends to the row's history,
// in its own statement: outcome "lease expired", the worker that lost the
// row, its claim's time as its start and its lease's end as its end, the
// rescuer's reason as its error; whether the row goes back to received or
// dead. A row whose lease expired before its handler started (its
// attempt refunded) gets no entry: it was not attempted.
func TestRescueRecordsTheAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.insert(t, "x", "started", "unstarted", "last")
	claimedAt := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	if _, err := b.db.Pool.Exec(ctx, `UPDATE inbox SET status = 'processing', lease_token = 7,
		lease_expires_at = $1::timestamptz + interval '5 seconds', updated_at = $1, locked_by = 'lost-worker',
		attempts = CASE event_id WHEN 'last' THEN 3 ELSE 1 END, started = event_id <> 'unstarted'`, claimedAt); err != nil {
		t.Fatal(err)
	}
	p := newTestPool(t, b) // MaxAttempts 3
	if n, err := p.Rescue(ctx); err != nil || n != 3 {
		t.Fatalf("Rescue = %d, %v; want 3 rows", n, err)
	}
	for id, want := range map[string]struct {
		status  string
		attempt int
	}{"started": {"received", 1}, "last": {"dead", 3}} {
		r := b.row(t, id)
		h := b.history(t, id)
		if r.Status != want.status || len(h) != 1 {
			t.Fatalf("%s: %s with history %+v; want %s and one attempt", id, r.Status, h, want.status)
		}
		a := h[0]
		wantErr := fmt.Sprintf("%s%d (worker lost-worker lost the row)", maintenance.ExpiredPrefix, want.attempt)
		if a.Attempt != want.attempt || a.Outcome != "lease expired" || a.Worker != "lost-worker" || a.Error != wantErr ||
			errString(r.LastError) != wantErr || !a.StartedAt.Equal(claimedAt) || !a.FinishedAt.Equal(claimedAt.Add(5*time.Second)) {
			t.Errorf("%s: attempt %+v, last_error %q; want attempt %d lease expired by lost-worker from %v to %v, error %q",
				id, a, errString(r.LastError), want.attempt, claimedAt, claimedAt.Add(5*time.Second), wantErr)
		}
	}
	if r, h := b.row(t, "unstarted"), b.history(t, "unstarted"); r.Status != "received" || r.Attempts != 0 || len(h) != 0 {
		t.Errorf("unstarted: %s, %d attempts, history %+v; want received, refunded, no entry", r.Status, r.Attempts, h)
	}
}

// The histories written with transactional handlers' outcomes commit in
// the handlers' transactions: the end of a row that failed before
// (HandleTx), and every kept attempt of a transactional batch's rows
// (HandleTxBatch: a row's own failure, its death, its end). Triggers note
// the transaction of each outcome write (an update of a processing row),
// of each history entry and of each handler's effect: each entry's is its
// outcome's, and a final entry's is its handler's effect's. Rows
// processed at their first attempt keep nothing.
func TestTxAttemptHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.noteTransactions(t)
	effect := func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO xids VALUES ('effect', $1, $2, txid_current())`, ev.ID, ev.Attempt)
		return err
	}
	if err := b.reg.HandleTx("tx.one", handlers.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
		if ev.EventID == "one-later" && ev.Attempt <= 2 {
			return errors.New("http 503")
		}
		return effect(ctx, tx, ev)
	}), handlers.MaxAttempts(5)); err != nil {
		t.Fatal(err)
	}
	if err := b.reg.HandleTxBatch("tx.many", handlers.TxBatchHandlerFunc(func(ctx context.Context, tx pgx.Tx, evs []*handlers.Event) error {
		errs := make(handlers.RowErrors, len(evs))
		for i, ev := range evs {
			switch {
			case ev.EventID == "many-bad":
				errs[i] = handlers.Permanent(errors.New("malformed"))
			case ev.EventID == "many-later" && ev.Attempt <= 2:
				errs[i] = errors.New("not yet")
			default:
				if err := effect(ctx, tx, ev); err != nil {
					return err
				}
			}
		}
		return errs
	}), handlers.Batching(10, 0, 0), handlers.MaxAttempts(5)); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "tx.one", "one-later", "one-first")
	b.insert(t, "tx.many", "many-later", "many-bad", "many-first")
	p := b.start(t, testConfig())
	waitFor(t, 30*time.Second, "every row finished", func() bool {
		return b.countStatus(t, "processed") == 4 && b.countStatus(t, "dead") == 1
	})
	p.stop(t)
	for id, want := range map[string][]string{
		"one-later":  {outcomeRetried, outcomeRetried, outcomeProcessed},
		"one-first":  {},
		"many-later": {outcomeRetried, outcomeRetried, outcomeProcessed},
		"many-bad":   {outcomeDead},
		"many-first": {},
	} {
		h := b.history(t, id)
		if got := outcomesOf(h); !slices.Equal(got, want) {
			t.Errorf("%s: history %v, want %v", id, got, want)
		}
		for i, a := range h {
			if a.Attempt != i+1 || a.Worker == "" || a.FinishedAt.Before(a.StartedAt) {
				t.Errorf("%s: attempt %d: %+v", id, i+1, a)
			}
		}
	}
	entries := b.entryTransactions(t)
	for _, e := range entries {
		final := strings.HasSuffix(e.eventID, "-later") && e.attempt == 3
		switch {
		case strings.HasPrefix(e.eventID, "one-") && final:
			// A transactional handler's success is written by its own
			// transaction, not as an update of the completer's.
			if e.effect == nil || *e.effect != e.entry {
				t.Errorf("%s: the entry's transaction %d is not its handler's (%s)", e, e.entry, xidString(e.effect))
			}
		case e.outcome == nil || *e.outcome != e.entry:
			t.Errorf("%s: the entry's transaction %d is not its outcome's (%s)", e, e.entry, xidString(e.outcome))
		case final && (e.effect == nil || *e.effect != e.entry):
			t.Errorf("%s: the entry's transaction %d is not its handler's (%s)", e, e.entry, xidString(e.effect))
		}
	}
	if len(entries) != 7 {
		t.Errorf("entries %v, want 7", entries)
	}
}

// xidString is a transaction id noted, or "none".
func xidString(x *int64) string {
	if x == nil {
		return "none"
	}
	return fmt.Sprint(*x)
}

// noteTransactions makes triggers note, in table xids, the transaction of
// each outcome write (an update of a processing row that ends it: what,
// 'outcome'; attempt, the row's attempts after it) and of each history
// entry ('entry'); handlers note their effects' ('effect') themselves.
func (b *bundle) noteTransactions(t testing.TB) {
	t.Helper()
	if _, err := b.db.Pool.Exec(context.Background(), `
		CREATE TABLE xids (what text, row_id bigint, attempt int, xid bigint);
		CREATE FUNCTION note_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO xids VALUES ('outcome', NEW.id, NEW.attempts, txid_current());
			RETURN NULL;
		END $$;
		CREATE TRIGGER note_outcome AFTER UPDATE ON inbox FOR EACH ROW
			WHEN (OLD.status = 'processing' AND NEW.status <> 'processing') EXECUTE FUNCTION note_outcome();
		CREATE FUNCTION note_entry() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO xids VALUES ('entry', NEW.row_id, NEW.attempt, txid_current());
			RETURN NULL;
		END $$;
		CREATE TRIGGER note_entry AFTER INSERT ON inbox_attempts FOR EACH ROW EXECUTE FUNCTION note_entry();`); err != nil {
		t.Fatal(err)
	}
}

// entryTx is a history entry's transaction beside its outcome's and its
// handler's effect's (nil: none noted), as noteTransactions noted them.
type entryTx struct {
	eventID         string
	attempt         int
	entry           int64
	outcome, effect *int64
}

func (e entryTx) String() string { return fmt.Sprintf("%s attempt %d", e.eventID, e.attempt) }

// entryTransactions is every history entry noted, by event id and attempt.
func (b *bundle) entryTransactions(t testing.TB) []entryTx {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `
		SELECT i.event_id, e.attempt, e.xid, o.xid, f.xid
		FROM xids AS e
		JOIN inbox AS i ON i.id = e.row_id
		LEFT JOIN xids AS o ON o.what = 'outcome' AND o.row_id = e.row_id AND o.attempt = e.attempt
		LEFT JOIN xids AS f ON f.what = 'effect' AND f.row_id = e.row_id AND f.attempt = e.attempt
		WHERE e.what = 'entry'
		ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	var out []entryTx
	for rows.Next() {
		var e entryTx
		if err := rows.Scan(&e.eventID, &e.attempt, &e.entry, &e.outcome, &e.effect); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// BenchmarkHistoryOfFirstAttempts is what the history costs the completer
// on the happy path, in Go: looking through a batch of first-attempt
// successes (a full completion batch) for attempts to keep, and finding
// none (the completion then runs its statement without the history's
// part). It should allocate nothing.
func BenchmarkHistoryOfFirstAttempts(b *testing.B) {
	a := archetype{cfg: settings{Config: worker.Config{ID: "bench"}}}
	batch := make([]result, 500)
	for i := range batch {
		batch[i] = result{job: &job{}, id: int64(i + 1), outcome: outcomeProcessed, attempt: 1}
	}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if h := a.historyOf(batch, now); len(h.Attempts) != 0 {
			b.Fatalf("%d attempts kept", len(h.Attempts))
		}
	}
}
