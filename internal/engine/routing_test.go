package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/testkit"
	"github.com/inboxd/inboxd/worker"
)

// Reproduction from the bug report: with INBOXD_WORKERS=2, two rows routed
// to a slow endpoint and one ignore row all waited 10s — one slow type held
// every other type back. Each route has its own concurrency: the ignore
// row is processed at once while both slow rows run.
func TestSlowRouteDoesNotHoldOthersBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	var running concurrency
	if err := b.reg.HandleFunc("slow", func(ctx context.Context, _ *handlers.Event) error {
		running.enter()
		defer running.leave()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.reg.Handle("audit", handlers.Ignore()); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Workers = 2
	b.start(t, cfg)
	b.insert(t, "slow", "s-1", "s-2")
	waitFor(t, 10*time.Second, "both slow rows running", func() bool { return running.peak() == 2 })
	b.insert(t, "audit", "a-1")
	waitFor(t, 2*time.Second, "the ignore row processed while the slow ones run", func() bool {
		return b.row(t, "a-1").Status == "processed"
	})
	if running.now != 2 {
		t.Errorf("%d slow rows running, want both still running", running.now)
	}
	close(release)
	waitFor(t, 10*time.Second, "all processed", func() bool { return b.countStatus(t, "processed") == 3 })
}

// Per-route limits and retry policy override the pool's, and the metrics
// show them: a route of concurrency 1 never runs two rows at once; a route
// of 2 attempts goes dead after 2 (the pool's default is 3); a route's
// backoff spaces its retries (the pool's is 10–50ms); a route's timeout
// cancels a hung attempt, which counts as failed.
func TestRouteOverrides(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var single concurrency
	release := make(chan struct{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.reg.HandleFunc("single", func(ctx context.Context, _ *handlers.Event) error {
		single.enter()
		defer single.leave()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, handlers.Concurrency(1)))
	must(b.reg.HandleFunc("twice", func(context.Context, *handlers.Event) error {
		return errors.New("still down")
	}, handlers.MaxAttempts(2)))
	must(b.reg.HandleFunc("slow.retry", func(context.Context, *handlers.Event) error {
		return errors.New("try later")
	}, handlers.Backoff(20*time.Second, 40*time.Second)))
	must(b.reg.HandleFunc("hangs", func(ctx context.Context, _ *handlers.Event) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}, handlers.Timeout(100*time.Millisecond), handlers.MaxAttempts(1)))
	cfg := testConfig()
	cfg.Workers = 8
	p := b.start(t, cfg)
	b.insert(t, "single", ids("single", 4)...)
	b.insert(t, "twice", "t-1")
	b.insert(t, "slow.retry", "r-1")
	b.insert(t, "hangs", "h-1")

	waitFor(t, 10*time.Second, "a single row running", func() bool { return single.peak() == 1 })
	if got := testutil.ToFloat64(p.metrics.routeLimit.WithLabelValues("single")); got != 1 {
		t.Errorf("route concurrency gauge = %v, want 1", got)
	}
	if got := testutil.ToFloat64(p.metrics.routeLimit.WithLabelValues(otherEventTypes)); got != 8 {
		t.Errorf("default route concurrency gauge = %v, want the pool's 8", got)
	}
	waitFor(t, 10*time.Second, "twice dead after two attempts", func() bool { return b.row(t, "t-1").Status == "dead" })
	if r := b.row(t, "t-1"); r.Attempts != 2 || !contains(errString(r.LastError), "attempt 2 of 2") {
		t.Errorf("twice = %+v (%s), want dead after attempt 2 of 2", r, errString(r.LastError))
	}
	waitFor(t, 10*time.Second, "slow.retry rescheduled", func() bool {
		r := b.row(t, "r-1")
		return r.Status == "received" && r.Attempts == 1
	})
	if r := b.row(t, "r-1"); r.AvailableAt.Sub(r.UpdatedAt) < 10*time.Second {
		t.Errorf("slow.retry rescheduled %s later, want the route's backoff (10s–20s)", r.AvailableAt.Sub(r.UpdatedAt))
	}
	waitFor(t, 10*time.Second, "hung attempt cut by the route's timeout", func() bool { return b.row(t, "h-1").Status == "dead" })
	if r := b.row(t, "h-1"); !contains(errString(r.LastError), "timed out") {
		t.Errorf("hangs last_error = %q, want the timeout named", errString(r.LastError))
	}
	close(release)
	waitFor(t, 10*time.Second, "single rows processed", func() bool { return single.peak() == 1 && b.countLike(t, "single-%") == 4 })
	waitFor(t, 10*time.Second, "single rows processed", func() bool {
		var n int
		if err := b.db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM inbox WHERE event_type = 'single' AND status = 'processed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 4
	})
	if got := single.peak(); got != 1 {
		t.Errorf("concurrency-1 route ran %d rows at once", got)
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// orderLog records, per key, the order of first successes and whether two
// rows of one key ever ran at once.
type orderLog struct {
	mu       sync.Mutex
	inFlight map[string]int
	overlap  []string
	done     map[string][]int // key → sequence numbers of first successes
	seen     map[string]bool  // event id → succeeded once
}

func newOrderLog() *orderLog {
	return &orderLog{inFlight: map[string]int{}, done: map[string][]int{}, seen: map[string]bool{}}
}

func (o *orderLog) enter(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inFlight[key]++
	if o.inFlight[key] > 1 {
		o.overlap = append(o.overlap, key)
	}
}

func (o *orderLog) leave(key, eventID string, seq int, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inFlight[key]--
	if ok && !o.seen[eventID] {
		o.seen[eventID] = true
		o.done[key] = append(o.done[key], seq)
	}
}

// insertKeyed inserts, for each of keys keys, events events of type typ in
// interleaved arrival order (key 0 event 0, key 1 event 0, …), event ids
// "<key>:<seq>".
func (b *bundle) insertKeyed(t testing.TB, typ string, keys, events int) {
	t.Helper()
	var srcs, evIDs, types []string
	var keyVals [][]byte
	for seq := range events {
		for k := range keys {
			srcs = append(srcs, "test")
			evIDs = append(evIDs, fmt.Sprintf("k%04d:%03d", k, seq))
			types = append(types, typ)
			keyVals = append(keyVals, []byte(fmt.Sprintf("k%04d", k)))
		}
	}
	if _, err := b.db.Pool.Exec(context.Background(), `
		INSERT INTO inbox (source, event_id, event_type, key)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])`, srcs, evIDs, types, keyVals); err != nil {
		t.Fatal(err)
	}
}

// Ordered routes hand rows of one (source, key) to their handlers strictly
// in arrival order, one at a time, with two pools (as two replicas) taking
// rows concurrently, handlers of random length and retryable failures;
// different keys run in parallel.
func TestOrderedRouteKeepsArrivalOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const keys, events = 40, 15
	log := newOrderLog()
	rnd := testkit.Rand(t) // handler lengths and failures
	handler := func(ctx context.Context, ev *handlers.Event) error {
		var seq int
		if _, err := fmt.Sscanf(ev.EventID[len(ev.EventID)-3:], "%d", &seq); err != nil {
			return handlers.Permanent(err)
		}
		key := string(ev.Key)
		log.enter(key)
		time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond)
		fail := rnd.IntN(5) == 0
		log.leave(key, ev.EventID, seq, !fail)
		if fail {
			return errors.New("flaky")
		}
		return nil
	}
	for range 2 {
		reg := handlers.NewRegistry()
		if err := reg.HandleFunc("order.event", handler, handlers.Ordered(""), handlers.MaxAttempts(50)); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.Workers = 16
		cfg.RetryPolicy = worker.ExponentialBackoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}
		(&bundle{db: b.db, reg: reg}).start(t, cfg)
	}
	b.insertKeyed(t, "order.event", keys, events)
	waitFor(t, 120*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == keys*events })

	log.check(t, keys, events)
}

// check fails t unless no two rows of a key ran at once and each of keys
// keys (insertKeyed's) had its events events succeed first in order.
func (o *orderLog) check(t *testing.T, keys, events int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.overlap) > 0 {
		t.Errorf("two rows of one key ran at once for keys %v", o.overlap)
	}
	for k := range keys {
		key := fmt.Sprintf("k%04d", k)
		got := o.done[key]
		if len(got) != events {
			t.Errorf("key %s: %d events succeeded, want %d", key, len(got), events)
			continue
		}
		for i, seq := range got {
			if seq != i {
				t.Errorf("key %s: first successes in order %v, want 0..%d", key, got, events-1)
				break
			}
		}
	}
}

// When a row of an ordered route goes dead, on_dead decides: block stops
// its key (other keys flow) until the row is requeued (it is then
// processed first) or discarded; skip lets the key move on.
func TestOrderedDeadRowBlocksOrSkips(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var mu sync.Mutex
	var order []string
	poisonOK := make(chan struct{})
	handler := func(ctx context.Context, ev *handlers.Event) error {
		if ev.EventID[len(ev.EventID)-3:] == "000" && string(ev.Key) == "k0000" {
			select {
			case <-poisonOK:
			default:
				return handlers.Permanent(errors.New("poison"))
			}
		}
		mu.Lock()
		order = append(order, ev.EventType+"/"+ev.EventID)
		mu.Unlock()
		return nil
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.reg.HandleFunc("blk", handler, handlers.Ordered(handlers.OnDeadBlock)))
	must(b.reg.HandleFunc("skp", handler, handlers.Ordered(handlers.OnDeadSkip)))
	cfg := testConfig()
	cfg.StatsInterval = 100 * time.Millisecond
	p := b.start(t, cfg)
	// blk and skp share no key values here: source is the same, so use
	// different key sets per route to keep them apart.
	b.insertKeyed(t, "blk", 3, 4) // keys k0000..k0002; k0000's first event is poison
	waitFor(t, 10*time.Second, "other blk keys processed", func() bool {
		var n int
		if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE event_type = 'blk' AND status = 'processed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 8
	})
	// Outcomes are written in batches: the poison row's may follow the
	// others'.
	waitFor(t, 5*time.Second, "poison row dead", func() bool { return b.row(t, "k0000:000").Status == "dead" })
	// The rows behind it were claimed with it (its chain) and are given
	// back unstarted; those writes may land after the dead row's.
	for _, id := range []string{"k0000:001", "k0000:002", "k0000:003"} {
		waitFor(t, 5*time.Second, id+" received (waiting) behind a dead row on a blocking route", func() bool {
			r := b.row(t, id)
			return r.Status == "received" && r.Attempts == 0
		})
	}
	waitFor(t, 5*time.Second, "blocked key counted", func() bool { return testutil.ToFloat64(p.metrics.maintenance.BlockedKeys) == 1 })

	// Requeue: the dead row is processed first, then the rest in order.
	close(poisonOK)
	if _, err := b.db.Pool.Exec(ctx, `UPDATE inbox SET status = 'received', attempts = 0, available_at = now()
		WHERE event_id = 'k0000:000'`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "blocked key drained", func() bool { return b.row(t, "k0000:003").Status == "processed" })
	mu.Lock()
	var k0 []string
	for _, e := range order {
		if len(e) > 9 && e[4:9] == "k0000" {
			k0 = append(k0, e)
		}
	}
	mu.Unlock()
	if fmt.Sprint(k0) != "[blk/k0000:000 blk/k0000:001 blk/k0000:002 blk/k0000:003]" {
		t.Errorf("k0000 after requeue ran as %v", k0)
	}
	waitFor(t, 5*time.Second, "no blocked key left", func() bool { return testutil.ToFloat64(p.metrics.maintenance.BlockedKeys) == 0 })

	// Skip: a second poison-free batch on skp where a dead row does not
	// stop its key.
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, key, status, attempts, last_error)
		VALUES ('test', 'dead-first', 'skp', 'sk', 'dead', 1, 'boom');
		INSERT INTO inbox (source, event_id, event_type, key) VALUES ('test', 'after-dead', 'skp', 'sk')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "skip route moves on", func() bool { return b.row(t, "after-dead").Status == "processed" })

	// Discard on a blocking route: the key's next row goes on (the
	// sweeper unparks it).
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, key, status, attempts, last_error)
		VALUES ('test', 'blk-dead', 'blk', 'dk', 'dead', 1, 'boom');
		INSERT INTO inbox (source, event_id, event_type, key) VALUES ('test', 'blk-next', 'blk', 'dk')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "next row parked behind the dead one", func() bool {
		var parked bool
		if err := b.db.Pool.QueryRow(ctx, `SELECT available_at = '9999-12-31 00:00:00+00' FROM inbox WHERE event_id = 'blk-next'`).Scan(&parked); err != nil {
			t.Fatal(err)
		}
		return parked
	})
	if _, err := b.db.Pool.Exec(ctx, `DELETE FROM inbox WHERE event_id = 'blk-dead'`); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Unpark(ctx); err != nil || n != 1 {
		t.Fatalf("Unpark after the discard = %d, %v; want 1", n, err)
	}
	waitFor(t, 10*time.Second, "discard unblocks the key", func() bool { return b.row(t, "blk-next").Status == "processed" })
}

// Reproduction from the fault suite: a SIGHUP reload (SetRegistry) changed
// a route's policy while its handlers read it, a data race the race
// detector reported. Reloads now swap policies under the pool's lock and
// each attempt runs with the policy of its dispatch; this test reloads
// without pause while 400 rows run (go test -race fails it otherwise), and
// every row is processed once under either policy.
func TestReloadWhileHandlersRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs sync.Map
	handle := func(_ context.Context, ev *handlers.Event) error {
		if _, dup := runs.LoadOrStore(ev.EventID, true); dup {
			t.Errorf("%s handled twice", ev.EventID)
		}
		time.Sleep(time.Millisecond)
		return nil
	}
	registry := func(concurrency int, timeout time.Duration) *handlers.Registry {
		r := handlers.NewRegistry()
		if err := r.HandleFunc("reloaded", handle, handlers.Concurrency(concurrency), handlers.Timeout(timeout)); err != nil {
			t.Fatal(err)
		}
		return r
	}
	b.reg = registry(2, time.Minute)
	p := b.start(t, testConfig())
	done := make(chan struct{})
	var reloads sync.WaitGroup
	reloads.Add(1)
	go func() {
		defer reloads.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			p.SetRegistry(registry(1+i%4, time.Duration(1+i%3)*time.Minute))
		}
	}()
	b.insert(t, "reloaded", ids("r", 400)...)
	waitFor(t, 30*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == 400 })
	close(done)
	reloads.Wait()
}

// A hot key's backlog does not hold other keys back. 20,000 rows of one key
// come first; each claim reads a batch of them and parks all but the head,
// which claims nothing new for a while. Claims that only park were then
// not repeated at once once the route had claimed nothing for 2 s: the
// pool waited for its poll (a minute here) between batches, and the other
// keys' rows, behind the backlog, waited minutes. Parking is progress: the
// pool claims again at once, and the other keys are done in seconds.
func TestHotKeyBacklogDoesNotHoldOtherKeysBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	var others atomic.Int64
	if err := b.reg.HandleFunc("ord", func(ctx context.Context, ev *handlers.Event) error {
		if string(ev.Key) == "hot" {
			select { // the hot key's head stays running: its backlog stays parked
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
		others.Add(1)
		return nil
	}, handlers.Ordered(handlers.OnDeadBlock)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(context.Background(), `
		INSERT INTO inbox (source, event_id, event_type, key)
		SELECT 'test', 'hot-' || g, 'ord', 'hot' FROM generate_series(1, 20000) AS g`); err != nil {
		t.Fatal(err)
	}
	b.insertKeyed(t, "ord", 50, 2)
	cfg := testConfig()
	cfg.PollInterval = time.Minute
	b.start(t, cfg)
	defer close(release)
	waitFor(t, 45*time.Second, "the other keys' 100 rows processed behind the hot key's backlog", func() bool {
		return others.Load() == 100
	})
}

// A claim that takes an ordered key's head also takes the next rows of its
// key (up to orderedChain) through the key index, and the worker runs them
// one after the other: while the head's handler runs, its followers are
// already claimed by the same statement, unstarted. A follower whose row
// before it fails goes back unstarted (its attempt not counted), and the
// key resumes in order after the retry.
func TestOrderedChainClaimsAKeysNextRowsWithItsHead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const events = 20
	log := newOrderLog()
	headRuns := make(chan struct{})
	headGo := make(chan struct{})
	var failedOnce atomic.Bool
	if err := b.reg.HandleFunc("chain.event", func(ctx context.Context, ev *handlers.Event) error {
		var seq int
		if _, err := fmt.Sscanf(ev.EventID[len(ev.EventID)-3:], "%d", &seq); err != nil {
			return handlers.Permanent(err)
		}
		if seq == 0 {
			close(headRuns)
			<-headGo
		}
		log.enter(string(ev.Key))
		fail := seq == 5 && failedOnce.CompareAndSwap(false, true)
		log.leave(string(ev.Key), ev.EventID, seq, !fail)
		if fail {
			return errors.New("flaky")
		}
		return nil
	}, handlers.Ordered("")); err != nil {
		t.Fatal(err)
	}
	b.insertKeyed(t, "chain.event", 1, events)
	b.start(t, testConfig())
	<-headRuns

	var token int64
	if err := b.db.Pool.QueryRow(ctx, `SELECT lease_token FROM inbox WHERE event_id = 'k0000:000'`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	rows, err := b.db.Pool.Query(ctx, `SELECT event_id, status, coalesce(lease_token = $1 AND NOT started, false) FROM inbox
		WHERE event_id <> 'k0000:000' ORDER BY id`, token)
	if err != nil {
		t.Fatal(err)
	}
	type state struct {
		ID, Status string
		Follower   bool
	}
	states, err := pgx.CollectRows(rows, pgx.RowToStructByPos[state])
	if err != nil {
		t.Fatal(err)
	}
	if orderedChain < 1 || orderedChain >= events {
		t.Fatalf("the test needs 1 <= orderedChain < %d, got %d", events, orderedChain)
	}
	for i, s := range states {
		chained := i < orderedChain
		if chained && (s.Status != "processing" || !s.Follower) {
			t.Errorf("%s = %s (claimed with the head, unstarted: %v) while the head runs, want claimed with it", s.ID, s.Status, s.Follower)
		}
		if !chained && s.Status != "received" {
			t.Errorf("%s = %s while the head runs, want received (beyond the chain)", s.ID, s.Status)
		}
	}
	close(headGo)

	waitFor(t, 30*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == events })
	log.mu.Lock()
	if len(log.overlap) > 0 {
		t.Errorf("two rows of the key ran at once: %v", log.overlap)
	}
	if got := log.done["k0000"]; len(got) != events || !slices.IsSorted(got) {
		t.Errorf("first successes in order %v, want 0..%d", got, events-1)
	}
	log.mu.Unlock()
	for seq := range events {
		want := 1
		if seq == 5 {
			want = 2
		}
		if r := b.row(t, fmt.Sprintf("k0000:%03d", seq)); r.Attempts != want {
			t.Errorf("k0000:%03d: %d attempts, want %d (rows given back unstarted behind a failure count none)", seq, r.Attempts, want)
		}
	}
}

// At shutdown the rows waiting in a key's chain go back unstarted, like the
// rest of the queue: received, their claim's attempt not counted, no lease.
func TestShutdownReleasesChainedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	headRuns := make(chan struct{})
	if err := b.reg.HandleFunc("chain.event", func(ctx context.Context, ev *handlers.Event) error {
		if ev.EventID == "k0000:000" {
			close(headRuns)
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, handlers.Ordered("")); err != nil {
		t.Fatal(err)
	}
	b.insertKeyed(t, "chain.event", 1, 5)
	cfg := testConfig()
	cfg.ShutdownTimeout = 100 * time.Millisecond
	p := b.start(t, cfg)
	<-headRuns
	p.stop(t)
	var left int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox
		WHERE status = 'received' AND attempts = 0 AND lease_token IS NULL`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 5 {
		t.Errorf("%d of 5 rows received, unattempted and without a lease after shutdown", left)
	}
}

// A claim marks started the heads of ordered keys that idle handlers take
// at once, however long the chains claimed before them: the database
// counts their attempts from the claim (should the worker die, a rescue
// does not refund them). Renewals, which would mark them too, are dropped
// meanwhile.
func TestOrderedClaimMarksEveryHeadItStartsStarted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.dropRenewals(t, "true")
	const keys = 3
	var entered atomic.Int32
	release := make(chan struct{})
	if err := b.reg.HandleFunc("chain.event", func(ctx context.Context, ev *handlers.Event) error {
		if ev.EventID[len(ev.EventID)-3:] == "000" {
			entered.Add(1)
			<-release
		}
		return nil
	}, handlers.Ordered("")); err != nil {
		t.Fatal(err)
	}
	b.insertKeyed(t, "chain.event", keys, 5)
	cfg := testConfig() // 4 workers: every head starts at once
	b.start(t, cfg)
	waitFor(t, 10*time.Second, "every head running", func() bool { return entered.Load() == keys })
	var heads, followers int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE event_id LIKE '%:000' AND started),
			count(*) FILTER (WHERE event_id NOT LIKE '%:000' AND started)
		FROM inbox`).Scan(&heads, &followers); err != nil {
		t.Fatal(err)
	}
	// The followers' start marks share the renewal statement: they may
	// start once renewals get through again.
	if _, err := b.db.Pool.Exec(ctx, `DROP TRIGGER drop_renewals ON inbox`); err != nil {
		t.Fatal(err)
	}
	close(release)
	if heads != keys {
		t.Errorf("%d of %d running heads marked started by their claim", heads, keys)
	}
	if followers != 0 {
		t.Errorf("%d chain followers marked started before they ran", followers)
	}
	waitFor(t, 10*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == keys*5 })
}
