package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/testkit"
)

// recorder is a Publisher that keeps what it was sent, in order, and fails
// as told.
type recorder struct {
	kind string
	mu   sync.Mutex
	sent []Message
	// fail, when set, decides each message's error (nil: acknowledged).
	fail func(m Message) error
	// check, when set, is Check.
	check func(m Message) error
	// block, when set, is waited on inside Publish (a paused relay).
	block chan struct{}
	// pipelines is PipelinesKeys.
	pipelines bool
	// delay, when set, is how long each Publish takes (a broker far away).
	delay time.Duration
}

func (p *recorder) Publish(ctx context.Context, msgs []Message) []error {
	if p.delay > 0 {
		t := time.NewTimer(p.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	if p.block != nil {
		select {
		case <-p.block:
		case <-ctx.Done():
		}
	}
	errs := make([]error, len(msgs))
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, m := range msgs {
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			continue
		}
		if p.fail != nil {
			if errs[i] = p.fail(m); errs[i] != nil {
				continue
			}
		}
		p.sent = append(p.sent, m)
	}
	return errs
}

func (p *recorder) Check(m Message) error {
	if p.check != nil {
		return p.check(m)
	}
	return nil
}
func (p *recorder) PipelinesKeys() bool { return p.pipelines }
func (p *recorder) Ready() bool         { return true }
func (p *recorder) Close() error        { return nil }

func (p *recorder) messages() []Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Message(nil), p.sent...)
}

// firsts returns the event ids of the messages sent, first occurrences
// only, in order.
func (p *recorder) firsts() []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range p.messages() {
		if !seen[m.EventID] {
			seen[m.EventID] = true
			out = append(out, m.EventID)
		}
	}
	return out
}

func testConfig() Config {
	return Config{PollInterval: 5 * time.Millisecond, Lease: 3 * time.Second, StatsInterval: 50 * time.Millisecond,
		RetentionInterval: time.Hour}
}

// startRelay runs a relay on db with pubs until the test ends, tuned
// first by each of tune.
func startRelay(t *testing.T, db *pgtest.DB, cfg Config, pubs map[string]Publisher, tune ...func(r *Relay)) (*Relay, context.CancelFunc) {
	t.Helper()
	r, err := New(db.Pool, pubs, cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tune {
		f(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = startstop.Run(ctx, r); close(done) }()
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("relay did not stop")
		}
	}
	t.Cleanup(stop)
	return r, stop
}

func insert(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, dest, eventID, key string) int64 {
	t.Helper()
	var id int64
	var k any
	if key != "" {
		k = key
	}
	if err := q.QueryRow(context.Background(),
		`INSERT INTO outbox (destination, event_id, event_type, key, payload) VALUES ($1, $2, 't', $3, 'x') RETURNING id`,
		dest, eventID, k).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func count(t *testing.T, db *pgtest.DB, where string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Watermill's SQL subscriber skipped exactly this row (ThreeDotsLabs/
// watermill#311): a relay that publishes "above the last id sent" never
// sees a lower id committed after a higher one was published.
func TestLateCommitIsNotSkipped(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	early, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Rollback(ctx)
	low := insert(t, early, "kafka:t", "low", "")
	high := insert(t, db.Pool, "kafka:t", "high", "")
	if low >= high {
		t.Fatalf("ids %d, %d: want the open transaction's lower", low, high)
	}
	pub := &recorder{kind: KindKafka}
	startRelay(t, db, testConfig(), map[string]Publisher{KindKafka: pub})
	testkit.WaitFor(t, 10*time.Second, "the higher id published", func() bool { return count(t, db, "status = 'published'") == 1 })
	if err := early.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the late commit published", func() bool { return count(t, db, "status = 'published'") == 2 })
	if got := pub.firsts(); len(got) != 2 || got[0] != "high" || got[1] != "low" {
		t.Errorf("published %v, want [high low]", got)
	}
}

// A rolled-back transaction's rows are never published; each committed row
// is, with its event id and type among the headers.
func TestRolledBackRowsAreNotPublished(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insert(t, tx, "kafka:t", "rolled-back", "k")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	insert(t, db.Pool, "kafka:t", "kept", "k")
	pub := &recorder{kind: KindKafka}
	startRelay(t, db, testConfig(), map[string]Publisher{KindKafka: pub})
	testkit.WaitFor(t, 10*time.Second, "the row published", func() bool { return count(t, db, "status = 'published'") == 1 })
	msgs := pub.messages()
	if len(msgs) != 1 || msgs[0].EventID != "kept" {
		t.Fatalf("published %+v, want the committed row alone", msgs)
	}
	want := map[string]string{EventIDHeader: "kept", EventTypeHeader: "t"}
	for _, h := range msgs[0].Headers {
		if v, ok := want[h.Key]; ok && v == h.Value {
			delete(want, h.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("headers %v lack %v", msgs[0].Headers, want)
	}
}

// A refused message is retried before its key's later rows go, the other
// keys going on meanwhile; a message refused every time goes dead after
// its attempts, with the reason, and its key moves on.
func TestRefusedRowHoldsItsKeyThenGoesDead(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for i := range 3 {
		for _, k := range []string{"a", "b", "c"} {
			insert(t, db.Pool, "kafka:t", fmt.Sprintf("%s%d", k, i), k)
		}
	}
	var mu sync.Mutex
	refusedOnce := false
	// a1 is refused once before it is sent (as a publisher's Check refuses
	// a message over the broker's limit), c1 every time after it was sent.
	pub := &recorder{kind: KindKafka, check: func(m Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.EventID == "a1" && !refusedOnce {
			refusedOnce = true
			return Refused("not now")
		}
		return nil
	}, fail: func(m Message) error {
		if m.EventID == "c1" {
			return Refused("message too large")
		}
		return nil
	}}
	cfg := testConfig()
	cfg.MaxAttempts = 3
	r, err := New(db.Pool, map[string]Publisher{KindKafka: pub}, cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.retry.Base, r.retry.Max = 200*time.Millisecond, 200*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = startstop.Run(ctx, r); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	testkit.WaitFor(t, 20*time.Second, "c1 dead and the rest published", func() bool {
		return count(t, db, "status = 'dead'") == 1 && count(t, db, "status = 'published'") == 8
	})
	var attempts int
	var lastErr string
	if err := db.Pool.QueryRow(context.Background(), `SELECT attempts, last_error FROM outbox WHERE event_id = 'c1'`).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 3 || !strings.Contains(lastErr, "message too large") {
		t.Errorf("dead row: attempts %d, last_error %q; want 3 and the reason", attempts, lastErr)
	}
	got := pub.firsts()
	pos := map[string]int{}
	for i, id := range got {
		pos[id] = i
	}
	for _, pair := range [][2]string{{"a0", "a1"}, {"a1", "a2"}, {"b0", "b1"}, {"b1", "b2"}, {"c0", "c2"}} {
		if pos[pair[0]] > pos[pair[1]] {
			t.Errorf("%s published before %s: %v", pair[1], pair[0], got)
		}
	}
	// b's rows did not wait for a1's retry.
	if pos["b2"] > pos["a1"] {
		t.Errorf("key b waited for key a's refused row: %v", got)
	}
}

// A destination that cannot be reached holds back its own rows only, costs
// them no attempt, and they go once it is back.
func TestUnreachableDestinationHoldsOnlyItsOwn(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for i := range 5 {
		insert(t, db.Pool, "kafka:down", fmt.Sprintf("d%d", i), "k")
		insert(t, db.Pool, "kafka:up", fmt.Sprintf("u%d", i), "k")
	}
	var mu sync.Mutex
	down := true
	pub := &recorder{kind: KindKafka, fail: func(m Message) error {
		mu.Lock()
		defer mu.Unlock()
		if down && m.Destination.Name == "down" {
			return errors.New("connection refused")
		}
		return nil
	}}
	startRelay(t, db, testConfig(), map[string]Publisher{KindKafka: pub})
	testkit.WaitFor(t, 10*time.Second, "the reachable destination published", func() bool {
		return count(t, db, "status = 'published' AND destination = 'kafka:up'") == 5
	})
	if n := count(t, db, "destination = 'kafka:down' AND (status <> 'pending' OR attempts > 0)"); n != 0 {
		t.Errorf("%d rows of the unreachable destination changed, want none", n)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	testkit.WaitFor(t, 20*time.Second, "the destination's rows published once it is back", func() bool {
		return count(t, db, "status = 'published'") == 10
	})
}

// A kind without a publisher is held back, not lost or dead.
func TestKindWithoutPublisherWaits(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	insert(t, db.Pool, "nats:orders.created", "n", "")
	insert(t, db.Pool, "kafka:t", "k", "")
	pub := &recorder{kind: KindKafka}
	startRelay(t, db, testConfig(), map[string]Publisher{KindKafka: pub})
	testkit.WaitFor(t, 10*time.Second, "the Kafka row published", func() bool { return count(t, db, "status = 'published'") == 1 })
	if n := count(t, db, "event_id = 'n' AND status = 'pending' AND attempts = 0"); n != 1 {
		t.Errorf("the NATS row without a publisher: %d pending untouched, want 1", n)
	}
}

// Two relays split the 32 shards, each publishing its own; when one stops,
// the other takes them all.
func TestRelaysShareTheShards(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	pa, pb := &recorder{kind: KindKafka}, &recorder{kind: KindKafka}
	cfg := testConfig()
	cfg.Lease = time.Second
	a, stopA := startRelay(t, db, cfg, map[string]Publisher{KindKafka: pa})
	b, _ := startRelay(t, db, cfg, map[string]Publisher{KindKafka: pb})
	owners := func() map[string]int {
		rows, err := db.Pool.Query(context.Background(), `SELECT coalesce(owner, ''), count(*) FROM outbox_shards WHERE expires_at > now() GROUP BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for rows.Next() {
			var o string
			var n int
			if err := rows.Scan(&o, &n); err != nil {
				t.Fatal(err)
			}
			m[o] = n
		}
		return m
	}
	testkit.WaitFor(t, 20*time.Second, "16 shards each", func() bool {
		o := owners()
		return o[a.ID()] == 16 && o[b.ID()] == 16
	})
	for i := range 200 {
		insert(t, db.Pool, "kafka:t", fmt.Sprintf("e%d", i), fmt.Sprintf("k%d", i%40))
	}
	testkit.WaitFor(t, 20*time.Second, "every row published", func() bool { return count(t, db, "status = 'published'") == 200 })
	if len(pa.messages()) == 0 || len(pb.messages()) == 0 {
		t.Errorf("relay a published %d, b %d: want both to publish", len(pa.messages()), len(pb.messages()))
	}
	for _, m := range pa.messages() {
		for _, n := range pb.messages() {
			if m.EventID == n.EventID {
				t.Fatalf("%s published by both relays", m.EventID)
			}
		}
	}
	stopA()
	testkit.WaitFor(t, 20*time.Second, "the survivor holds every shard", func() bool { return owners()[b.ID()] == 32 })
}

// A relay paused past its lease (SIGSTOP, a long GC, a cut network): another
// takes its shards and publishes; when the paused relay wakes, it publishes
// nothing more on them, and the outcomes it had in hand are fenced.
func TestPausedRelayIsFenced(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	id := insert(t, db.Pool, "kafka:t", "e", "k")
	paused := &recorder{kind: KindKafka}
	r, err := New(db.Pool, map[string]Publisher{KindKafka: paused}, testConfig(), zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.leaseTick(ctx)
	if n := r.owned(); n != driver.OutboxShards {
		t.Fatalf("relay holds %d shards, want %d", n, driver.OutboxShards)
	}
	leases := r.heldLeases(nil)
	// The relay "pauses" here; its leases expire, another relay takes the
	// shards and publishes the row.
	if _, err := db.Pool.Exec(ctx, `UPDATE outbox_shards SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	other := &recorder{kind: KindKafka}
	_, stopOther := startRelay(t, db, testConfig(), map[string]Publisher{KindKafka: other})
	testkit.WaitFor(t, 10*time.Second, "the new holder published", func() bool { return count(t, db, "status = 'published'") == 1 })
	stopOther()
	// Pending again, so that only the fence can stop the paused relay's write.
	if _, err := db.Pool.Exec(ctx, `UPDATE outbox SET status = 'pending', published_at = NULL`); err != nil {
		t.Fatal(err)
	}
	r.record(ctx, leases, time.Now().Add(time.Minute), []driver.OutboxOutcome{{ID: id, Status: driver.OutboxPublished}})
	if n := count(t, db, "status = 'pending'"); n != 1 {
		t.Errorf("the paused relay's outcome was written over the new holder's shard (%d pending, want 1)", n)
	}
	if v := testutil.ToFloat64(r.metrics.fenced); v != 1 {
		t.Errorf("fenced = %v, want 1", v)
	}
	// Awake, by its own clock its leases are over: it publishes nothing.
	r.mu.Lock()
	for _, l := range r.shards {
		l.deadline = time.Now().Add(-time.Millisecond)
	}
	r.mu.Unlock()
	for loop := range r.cfg.Loops {
		if n, err := r.publishOnce(ctx, loop); n != 0 || err != nil {
			t.Errorf("loop %d after the leases ended read %d rows (%v), want none", loop, n, err)
		}
	}
	if len(paused.messages()) != 0 {
		t.Errorf("the paused relay published %d messages", len(paused.messages()))
	}
	// Its next renewal finds the leases gone and says so.
	r.leaseTick(ctx)
	if v := testutil.ToFloat64(r.metrics.leaseLost); v != driver.OutboxShards {
		t.Errorf("leases lost = %v, want %d", v, driver.OutboxShards)
	}
}

// The ordering property over random commit interleavings: writers commit
// and roll back in random orders while the relay runs. Every committed row
// is published, no rolled-back row is, and per key a row that committed
// before another row of its key was written is first published before it.
func TestOrderUnderRandomInterleavings(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rnd := testkit.Rand(t)
	pub := &recorder{kind: KindKafka}
	cfg := testConfig()
	cfg.BatchSize = 7 // many batches, cut anywhere
	startRelay(t, db, cfg, map[string]Publisher{KindKafka: pub})

	type written struct {
		key      string
		inserted time.Time // before the insert was sent
		commit   time.Time // after the commit returned; zero: rolled back
	}
	var mu sync.Mutex
	rows := map[string]*written{}
	const writers, perWriter = 6, 25
	seeds := make([]uint64, writers)
	for i := range seeds {
		seeds[i] = rnd.Uint64()
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seeds[w], 0))
			ctx := context.Background()
			for i := range perWriter {
				tx, err := db.Pool.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				var mine []*written
				for j := range 1 + r.IntN(3) {
					id := fmt.Sprintf("w%d-%d-%d", w, i, j)
					wr := &written{key: fmt.Sprintf("k%d", r.IntN(5)), inserted: time.Now()}
					if _, err := tx.Exec(ctx, `INSERT INTO outbox (destination, event_id, event_type, key) VALUES ('kafka:t', $1, 't', $2)`, id, wr.key); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					rows[id] = wr
					mu.Unlock()
					mine = append(mine, wr)
				}
				time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond) // hold the transaction open a while
				if r.IntN(5) == 0 {
					err = tx.Rollback(ctx)
				} else {
					err = tx.Commit(ctx)
					now := time.Now()
					mu.Lock()
					for _, wr := range mine {
						wr.commit = now
					}
					mu.Unlock()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	committed := 0
	for _, wr := range rows {
		if !wr.commit.IsZero() {
			committed++
		}
	}
	testkit.WaitFor(t, 30*time.Second, "every committed row published", func() bool {
		return count(t, db, "status = 'published'") == committed
	})
	first := map[string]int{}
	for i, id := range pub.firsts() {
		first[id] = i
	}
	for id, wr := range rows {
		_, published := first[id]
		if wr.commit.IsZero() {
			if published {
				t.Errorf("%s was rolled back and published", id)
			}
			continue
		}
		if !published {
			t.Errorf("%s committed and never published", id)
		}
	}
	for x, wx := range rows {
		for y, wy := range rows {
			if wx.key != wy.key || wx.commit.IsZero() || wy.commit.IsZero() {
				continue
			}
			if wx.commit.Before(wy.inserted) && first[x] > first[y] {
				t.Errorf("key %s: %s committed before %s was written, and was published after it", wx.key, x, y)
			}
		}
	}
}

// Retention deletes rows published longer ago than the retention, in
// batches, and nothing else: pending and dead rows stay, and so do rows
// published recently. The gauges read the table.
func TestRetentionDeletesOnlyOldPublishedRows(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO outbox (destination, event_type, status, published_at)
		SELECT 'kafka:t', 't', 'published', now() - interval '2 hours' FROM generate_series(1, 12000);
		INSERT INTO outbox (destination, event_type, status, published_at)
		SELECT 'kafka:t', 't', 'published', now() - interval '10 minutes' FROM generate_series(1, 10);
		INSERT INTO outbox (destination, event_type, status, created_at, last_error)
		SELECT 'kafka:t', 't', 'dead', now() - interval '3 hours', 'too large' FROM generate_series(1, 3);
		INSERT INTO outbox (destination, event_type, created_at)
		SELECT 'nats:held', 't', now() - interval '90 seconds' FROM generate_series(1, 4);`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Retention = time.Hour
	cfg.RetentionInterval = 20 * time.Millisecond
	r, _ := startRelay(t, db, cfg, map[string]Publisher{KindKafka: &recorder{kind: KindKafka}})
	testkit.WaitFor(t, 30*time.Second, "old published rows deleted", func() bool {
		return count(t, db, "status = 'published'") == 10
	})
	if n := count(t, db, "status = 'dead'"); n != 3 {
		t.Errorf("%d dead rows left, want 3", n)
	}
	if n := count(t, db, "status = 'pending'"); n != 4 {
		t.Errorf("%d pending rows left, want 4", n)
	}
	if v := testutil.ToFloat64(r.metrics.deleted); v != 12000 {
		t.Errorf("deleted = %v, want 12000", v)
	}
	testkit.WaitFor(t, 10*time.Second, "the gauges read", func() bool {
		return testutil.ToFloat64(r.metrics.pending) == 4 && testutil.ToFloat64(r.metrics.dead) == 3 &&
			testutil.ToFloat64(r.metrics.oldest) >= 90
	})
}

// After a row of a key fails, no later row of that key is sent in the same
// round, whether the failure is a refusal or a destination not reached:
// the key's rows are published in their order once the first one goes
// through. Rows of the other keys go on.
func TestFailedRowStopsItsKeyInTheRound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"refused", Refused("rejected by the stream")},
		{"not reached", errors.New("no acknowledgement in time")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			for i := range 3 {
				insert(t, db.Pool, "nats:orders", fmt.Sprintf("k%d", i), "k")
				insert(t, db.Pool, "nats:orders", fmt.Sprintf("o%d", i), "o")
			}
			failed := false
			pub := &recorder{kind: KindNATS, fail: func(m Message) error {
				if m.EventID == "k0" && !failed { // under the recorder's lock
					failed = true
					return tc.err
				}
				return nil
			}}
			r, stop := startRelay(t, db, testConfig(), map[string]Publisher{KindNATS: pub}, func(r *Relay) {
				r.retry.Base, r.retry.Max = 20*time.Millisecond, 20*time.Millisecond
				r.hold.Base, r.hold.Max = 20*time.Millisecond, 20*time.Millisecond
			})
			_, _ = r, stop
			testkit.WaitFor(t, 20*time.Second, "every row published", func() bool { return count(t, db, "status = 'published'") == 6 })
			pos := map[string]int{}
			for i, id := range pub.firsts() {
				pos[id] = i
			}
			if pos["k0"] > pos["k1"] || pos["k1"] > pos["k2"] {
				t.Errorf("key k published in the order %v, want k0, k1, k2", pub.firsts())
			}
		})
	}
}

// One key's many rows on a broker that answers each message on its own
// (one round trip per row, here 40 ms) take more rounds than a batch's
// publish timeout holds: the batch starts no round past half of it and
// leaves the rest pending for the next batch, so no row fails on the
// deadline and the destination is never held as not reached; the key's
// rows go out in order.
func TestLongKeyLeavesTheRestToTheNextBatch(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for i := range 40 {
		insert(t, db.Pool, "amqp:x/rk", fmt.Sprintf("k%02d", i), "k")
	}
	pub := &recorder{kind: KindAMQP, delay: 40 * time.Millisecond}
	cfg := testConfig()
	cfg.PublishTimeout = 400 * time.Millisecond
	r, _ := startRelay(t, db, cfg, map[string]Publisher{KindAMQP: pub})
	testkit.WaitFor(t, 60*time.Second, "every row published", func() bool { return count(t, db, "status = 'published'") == 40 })
	if v := testutil.ToFloat64(r.metrics.failed.WithLabelValues(r.metrics.destination("amqp:x/rk"), "unavailable")); v != 0 {
		t.Errorf("%v publications failed as not reached, want none", v)
	}
	got := pub.firsts()
	for i := 1; i < len(got); i++ {
		if got[i-1] > got[i] {
			t.Fatalf("key k published out of order: %v", got)
		}
	}
}
