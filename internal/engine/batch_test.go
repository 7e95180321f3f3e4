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
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/testkit"
	"github.com/inboxd/inboxd/worker"
)

// batchLog records the batches a batch handler was called with.
type batchLog struct {
	mu      sync.Mutex
	batches [][]string // event ids, per call
	calls   map[string]int
}

func (l *batchLog) add(evs []*handlers.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == nil {
		l.calls = make(map[string]int)
	}
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.EventID
		l.calls[ev.EventID]++
	}
	l.batches = append(l.batches, ids)
}

func (l *batchLog) sizes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int, len(l.batches))
	for i, b := range l.batches {
		out[i] = len(b)
	}
	return out
}

// A batch route's rows reach its handler many at a time, never more than
// max_rows nor the route's concurrency at once, each row once, and every
// row ends processed.
func TestBatchHandlerTakesRowsManyAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var log batchLog
	var mu sync.Mutex
	running, most := 0, 0
	if err := b.reg.HandleBatch("bulk.load", handlers.BatchHandlerFunc(func(ctx context.Context, evs []*handlers.Event) error {
		mu.Lock()
		running += len(evs)
		most = max(most, running)
		mu.Unlock()
		log.add(evs)
		time.Sleep(time.Millisecond)
		mu.Lock()
		running -= len(evs)
		mu.Unlock()
		return nil
	}), handlers.Batching(10, 0, 0), handlers.Concurrency(25)); err != nil {
		t.Fatal(err)
	}
	rows := ids("bulk", 300)
	b.insert(t, "bulk.load", rows...)
	b.start(t, testConfig())
	waitFor(t, 60*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == len(rows) })

	sizes := log.sizes()
	if slices.Max(sizes) > 10 {
		t.Errorf("a batch of %d rows, max_rows is 10: %v", slices.Max(sizes), sizes)
	}
	if slices.Max(sizes) < 2 {
		t.Errorf("no batch held more than one row: %v", sizes)
	}
	if most > 25 {
		t.Errorf("%d rows in handlers at once, the route's concurrency is 25", most)
	}
	for _, id := range rows {
		if n := log.calls[id]; n != 1 {
			t.Errorf("row %s handled %d times, want 1", id, n)
		}
	}
}

// max_wait: a batch that is not full waits for more rows, at most
// max_wait, and then goes with the rows it has.
func TestBatchWaitsAtMostMaxWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var log batchLog
	const maxWait = 300 * time.Millisecond
	started := make(chan time.Time, 10)
	if err := b.reg.HandleBatch("bulk.wait", handlers.BatchHandlerFunc(func(ctx context.Context, evs []*handlers.Event) error {
		log.add(evs)
		started <- time.Now()
		return nil
	}), handlers.Batching(100, 0, maxWait)); err != nil {
		t.Fatal(err)
	}
	b.start(t, testConfig())
	inserted := time.Now()
	b.insert(t, "bulk.wait", ids("w", 3)...)
	var at time.Time
	select {
	case at = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the batch never ran")
	}
	waitFor(t, 30*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == 3 })
	if got := at.Sub(inserted); got < maxWait-50*time.Millisecond {
		t.Errorf("the batch of 3 went after %s: it did not wait for more rows (max_wait %s)", got, maxWait)
	}
	if sizes := log.sizes(); len(sizes) != 1 || sizes[0] != 3 {
		t.Errorf("batches %v, want one of 3 rows", sizes)
	}
}

// Each row of a batch has its own outcome: processed, dead at once
// (Permanent), or retried with its own delay (RetryAfter); a transactional
// batch's writes commit with the rows' outcomes, and a whole batch's
// error rolls every write back and retries every row.
func TestTxBatchRowOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createEffects(t)
	var log batchLog
	var mu sync.Mutex
	failedWhole := false
	if err := b.reg.HandleTxBatch("bulk.tx", handlers.TxBatchHandlerFunc(func(ctx context.Context, tx pgx.Tx, evs []*handlers.Event) error {
		log.add(evs)
		errs := make(handlers.RowErrors, len(evs))
		for i, ev := range evs {
			switch {
			case ev.EventID == "tx-bad":
				errs[i] = handlers.Permanent(errors.New("malformed"))
				continue
			case ev.EventID == "tx-later" && ev.Attempt == 2:
				errs[i] = handlers.RetryAfter(200*time.Millisecond, errors.New("not yet"))
				continue
			}
			if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, ev.EventID, ev.Attempt); err != nil {
				return err
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if !failedWhole {
			failedWhole = true
			return errors.New("the warehouse is down") // rolls back the effects above
		}
		return errs
	}), handlers.Batching(50, 0, 0), handlers.MaxAttempts(5)); err != nil {
		t.Fatal(err)
	}
	rows := append(ids("tx", 20), "tx-bad", "tx-later")
	b.insert(t, "bulk.tx", rows...)
	b.start(t, testConfig())
	waitFor(t, 60*time.Second, "every row finished", func() bool {
		return b.countStatus(t, "processed") == len(rows)-1 && b.countStatus(t, "dead") == 1
	})
	if r := b.row(t, "tx-bad"); r.Status != "dead" || !strings.Contains(errString(r.LastError), "malformed") {
		t.Errorf("tx-bad: %s %q, want dead with its own error", r.Status, errString(r.LastError))
	}
	if r := b.row(t, "tx-later"); r.Attempts != 3 {
		// 1: the whole batch failed; 2: its own retry; 3: processed.
		t.Errorf("tx-later took %d attempts, want 3", r.Attempts)
	}
	effects := b.effectCounts(t)
	for _, id := range rows {
		want := 1
		if id == "tx-bad" {
			want = 0
		}
		if effects[id] != want {
			t.Errorf("row %s: %d effects, want %d", id, effects[id], want)
		}
	}
}

// A row that keeps failing its batches (a whole batch's error whenever
// it is in one) runs alone on its last attempt, and goes dead alone: its
// batch-mates, retried with it, end processed.
func TestBatchPoisonRowIsIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var log batchLog
	var mu sync.Mutex
	var poisonBatches []int
	if err := b.reg.HandleBatch("bulk.poison", handlers.BatchHandlerFunc(func(ctx context.Context, evs []*handlers.Event) error {
		log.add(evs)
		for _, ev := range evs {
			if ev.EventID == "p-poison" {
				mu.Lock()
				poisonBatches = append(poisonBatches, len(evs))
				mu.Unlock()
				return errors.New("the batch failed")
			}
		}
		return nil
	}), handlers.Batching(100, 0, 0), handlers.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	rows := append(ids("p", 30), "p-poison")
	b.insert(t, "bulk.poison", rows...)
	b.start(t, testConfig())
	waitFor(t, 60*time.Second, "every row finished", func() bool {
		return b.countStatus(t, "processed")+b.countStatus(t, "dead") == len(rows)
	})
	if n := b.countStatus(t, "dead"); n != 1 {
		t.Errorf("%d rows dead, want the poison row alone", n)
	}
	if r := b.row(t, "p-poison"); r.Status != "dead" || r.Attempts != 3 {
		t.Errorf("the poison row: %s after %d attempts, want dead after 3", r.Status, r.Attempts)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(poisonBatches) != 3 || poisonBatches[2] != 1 {
		t.Errorf("the poison row's batches had %v rows, want 3 batches, the last of it alone", poisonBatches)
	}
	if poisonBatches[0] < 2 {
		t.Errorf("the poison row's first batch had %d rows: nothing shared it", poisonBatches[0])
	}
}

// A row of a transactional batch whose lease is lost while the batch runs
// has nothing committed: not its outcome, not its effects, while its
// batch-mates' are (the batch runs again without it).
func TestTxBatchFencedRowIsNotCommitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createEffects(t)
	var log batchLog
	var once sync.Once
	if err := b.reg.HandleTxBatch("bulk.fence", handlers.TxBatchHandlerFunc(func(ctx context.Context, tx pgx.Tx, evs []*handlers.Event) error {
		log.add(evs)
		for _, ev := range evs {
			if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, ev.EventID, ev.Attempt); err != nil {
				return err
			}
		}
		var err error
		once.Do(func() {
			// Another worker took f-00003 meanwhile (a rescue and a claim):
			// its token is not ours any more.
			_, err = b.db.Pool.Exec(ctx, `UPDATE inbox SET lease_token = lease_token + 1000000 WHERE event_id = 'f-00003'`)
		})
		return err
	}), handlers.Batching(100, 0, 0)); err != nil {
		t.Fatal(err)
	}
	rows := ids("f", 10)
	b.insert(t, "bulk.fence", rows...)
	p := b.start(t, testConfig())
	waitFor(t, 60*time.Second, "the others processed", func() bool { return b.countStatus(t, "processed") == len(rows)-1 })

	if r := b.row(t, "f-00003"); r.Status != "processing" {
		t.Errorf("the fenced row is %s: its outcome was written", r.Status)
	}
	effects := b.effectCounts(t)
	for _, id := range rows {
		want := 1
		if id == "f-00003" {
			want = 0
		}
		if effects[id] != want {
			t.Errorf("row %s: %d effects committed, want %d", id, effects[id], want)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.batches) < 2 || slices.Contains(log.batches[len(log.batches)-1], "f-00003") {
		t.Errorf("batches %v: the batch did not run again without the fenced row", log.batches)
	}
	if n := testutil.ToFloat64(p.metrics.fenced); n < 1 {
		t.Errorf("fenced counter %v, want at least 1", n)
	}
}

// An ordered batch route: a batch holds at most the head of each key,
// and each key's rows succeed in arrival order, with two pools (two
// replicas) and rows failing at random on their own.
func TestOrderedBatchKeepsArrivalOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const keys, events = 30, 8
	order := newOrderLog()
	rnd := testkit.Rand(t)
	var mu sync.Mutex
	var twice []string
	handler := handlers.BatchHandlerFunc(func(ctx context.Context, evs []*handlers.Event) error {
		seen := map[string]bool{}
		errs := make(handlers.RowErrors, len(evs))
		failed := false
		for i, ev := range evs {
			key := string(ev.Key)
			if seen[key] {
				mu.Lock()
				twice = append(twice, key)
				mu.Unlock()
			}
			seen[key] = true
			var seq int
			if _, err := fmt.Sscanf(ev.EventID[len(ev.EventID)-3:], "%d", &seq); err != nil {
				return handlers.Permanent(err)
			}
			order.enter(key)
			fail := rnd.IntN(5) == 0
			order.leave(key, ev.EventID, seq, !fail)
			if fail {
				errs[i] = errors.New("flaky")
				failed = true
			}
		}
		if failed {
			return errs
		}
		return nil
	})
	for range 2 {
		reg := handlers.NewRegistry()
		if err := reg.HandleBatch("order.batch", handler, handlers.Ordered(""), handlers.MaxAttempts(50),
			handlers.Batching(20, 0, 0)); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.RetryPolicy = worker.ExponentialBackoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}
		(&bundle{db: b.db, reg: reg}).start(t, cfg)
	}
	b.insertKeyed(t, "order.batch", keys, events)
	waitFor(t, 120*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == keys*events })

	mu.Lock()
	if len(twice) > 0 {
		t.Errorf("a batch held two rows of one key: %v", twice)
	}
	mu.Unlock()
	order.check(t, keys, events)
}

// max_bytes bounds a batch's bytes: rows of 20 bytes under a bound of 70
// go three at most to a batch.
func TestBatchMaxBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var log batchLog
	var mu sync.Mutex
	most := 0
	if err := b.reg.HandleBatch("bulk.bytes", handlers.BatchHandlerFunc(func(ctx context.Context, evs []*handlers.Event) error {
		log.add(evs)
		n := 0
		for _, ev := range evs {
			n += len(ev.Payload)
		}
		mu.Lock()
		most = max(most, n)
		mu.Unlock()
		return nil
	}), handlers.Batching(100, 70, 0)); err != nil {
		t.Fatal(err)
	}
	rows := ids("bytes", 60) // payloads {"id":"bytes-000NN"}: 20 bytes
	b.insert(t, "bulk.bytes", rows...)
	b.start(t, testConfig())
	waitFor(t, 60*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == len(rows) })
	sizes := log.sizes()
	if slices.Max(sizes) > 3 || most > 70 {
		t.Errorf("batches of %v rows, %d payload bytes at most: max_bytes is 70", sizes, most)
	}
	if slices.Max(sizes) < 2 {
		t.Errorf("no batch held more than one row: %v", sizes)
	}
}

// At shutdown, a running batch whose handler ends with its context has
// its rows released, their attempts not counted, as rows run alone; a
// transactional batch's writes are rolled back.
func TestShutdownReleasesBatchRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createEffects(t)
	entered := make(chan int, 1)
	if err := b.reg.HandleTxBatch("bulk.stop", handlers.TxBatchHandlerFunc(func(ctx context.Context, tx pgx.Tx, evs []*handlers.Event) error {
		for _, ev := range evs {
			if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, ev.EventID, ev.Attempt); err != nil {
				return err
			}
		}
		entered <- len(evs)
		<-ctx.Done()
		return context.Cause(ctx)
	}), handlers.Batching(100, 0, 0), handlers.Concurrency(100)); err != nil {
		t.Fatal(err)
	}
	rows := ids("s", 30)
	b.insert(t, "bulk.stop", rows...)
	cfg := testConfig()
	cfg.ShutdownTimeout = 200 * time.Millisecond
	p := b.start(t, cfg)
	if n := <-entered; n != len(rows) {
		t.Fatalf("the batch held %d rows, want all %d", n, len(rows))
	}
	p.stop(t)
	if n := b.countStatus(t, "received"); n != len(rows) {
		t.Fatalf("received = %d after shutdown, want all %d", n, len(rows))
	}
	for _, id := range rows {
		if r := b.row(t, id); r.Attempts != 0 || r.LeaseToken != nil {
			t.Fatalf("row %s not released cleanly: %+v", id, r)
		}
	}
	if n := len(b.effectCounts(t)); n != 0 {
		t.Errorf("%d effects committed by a batch cut at shutdown", n)
	}
}

// In a plain batch, a row whose lease is lost while the batch runs has
// its outcome fenced (counted, not written) while its batch-mates' are
// written.
func TestBatchFencedRowOutcomeNotWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var once sync.Once
	if err := b.reg.HandleBatch("bulk.pfence", handlers.BatchHandlerFunc(func(ctx context.Context, evs []*handlers.Event) error {
		var err error
		once.Do(func() {
			_, err = b.db.Pool.Exec(ctx, `UPDATE inbox SET lease_token = lease_token + 1000000 WHERE event_id = 'g-00002'`)
		})
		return err
	}), handlers.Batching(100, 0, 0)); err != nil {
		t.Fatal(err)
	}
	rows := ids("g", 10)
	b.insert(t, "bulk.pfence", rows...)
	p := b.start(t, testConfig())
	waitFor(t, 60*time.Second, "the others processed", func() bool { return b.countStatus(t, "processed") == len(rows)-1 })
	waitFor(t, 10*time.Second, "the fenced outcome counted", func() bool { return testutil.ToFloat64(p.metrics.fenced) >= 1 })
	if r := b.row(t, "g-00002"); r.Status != "processing" {
		t.Errorf("the fenced row is %s: its outcome was written", r.Status)
	}
}
