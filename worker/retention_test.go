package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
)

// seedRetention fills the inbox with rows of every kind retention must tell
// apart: expired processed rows (more than one batch), recent processed,
// received, processing, and old and recent dead and rejected rows.
func (b *bundle) seedRetention(t *testing.T, oldProcessed int) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, processed_at, updated_at)
		SELECT 'test', 'old-' || g, 'x', 'processed', now() - interval '2 hours', now() - interval '2 hours'
		FROM generate_series(1, $1) g`, oldProcessed); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, processed_at)
		SELECT 'test', 'recent-' || g, 'x', 'processed', now() - interval '10 minutes' FROM generate_series(1, 10) g;
		INSERT INTO inbox (source, event_id, event_type, received_at)
		SELECT 'test', 'received-' || g, 'x', now() - interval '3 hours' FROM generate_series(1, 5) g;
		INSERT INTO inbox (source, event_id, event_type, status, lease_token, lease_expires_at, received_at)
		SELECT 'test', 'processing-' || g, 'x', 'processing', 1, now() + interval '1 hour', now() - interval '3 hours'
		FROM generate_series(1, 3) g;
		INSERT INTO inbox (source, event_id, event_type, status, updated_at)
		SELECT 'test', s || '-old-' || g, 'x', s, now() - interval '2 hours'
		FROM generate_series(1, 4) g, unnest(ARRAY['dead', 'rejected']) s;
		INSERT INTO inbox (source, event_id, event_type, status)
		SELECT 'test', s || '-recent-' || g, 'x', s FROM generate_series(1, 2) g, unnest(ARRAY['dead', 'rejected']) s;`); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) countLike(t *testing.T, pattern string) int {
	t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE event_id LIKE $1`, pattern).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Retention deletes exactly the expired processed rows (and, when asked, the
// expired dead and rejected ones), in batches, with two replicas pruning at
// once: nothing is deleted twice or missed, and nothing else is touched.
func TestRetentionDeletesExactlyTheExpiredRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const oldProcessed = 2500
	b.seedRetention(t, oldProcessed)

	newRetention := func(failed time.Duration) *Retention {
		r, err := NewRetention(b.db.Pool, RetentionConfig{Processed: time.Hour, Failed: failed, Batch: 300, Pause: time.Millisecond},
			testLogger(t), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A dry run counts without deleting.
	dry, err := newRetention(time.Hour).Prune(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if dry.Processed != oldProcessed || dry.Failed != 8 {
		t.Fatalf("dry run = %+v, want %d processed and 8 dead/rejected", dry, oldProcessed)
	}
	if n := b.countLike(t, "old-%"); n != oldProcessed {
		t.Fatalf("the dry run deleted rows: %d old processed left", n)
	}

	// Two replicas, dead rows kept (INBOXD_DEAD_RETENTION=0).
	replicas := []*Retention{newRetention(0), newRetention(0)}
	var wg sync.WaitGroup
	results := make([]PruneResult, len(replicas))
	for i, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.Prune(ctx, false)
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		}()
	}
	wg.Wait()
	if got := results[0].Processed + results[1].Processed; got != oldProcessed {
		t.Fatalf("the replicas deleted %d + %d processed rows, want %d in all", results[0].Processed, results[1].Processed, oldProcessed)
	}
	for i, r := range replicas {
		if got := testutil.ToFloat64(r.metrics.deleted.WithLabelValues("processed")); got != float64(results[i].Processed) {
			t.Errorf("replica %d: deleted metric %v, result %d", i, got, results[i].Processed)
		}
	}
	for pattern, want := range map[string]int{
		"old-%": 0, "recent-%": 10, "received-%": 5, "processing-%": 3,
		"dead-old-%": 4, "rejected-old-%": 4, "dead-recent-%": 2, "rejected-recent-%": 2,
	} {
		if got := b.countLike(t, pattern); got != want {
			t.Errorf("%s: %d rows left, want %d", pattern, got, want)
		}
	}

	// With INBOXD_DEAD_RETENTION set, the old dead and rejected rows go too.
	res, err := newRetention(time.Hour).Prune(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Processed != 0 || res.Failed != 8 {
		t.Fatalf("second pass = %+v, want 0 processed and 8 dead/rejected", res)
	}
	for pattern, want := range map[string]int{"dead-old-%": 0, "rejected-old-%": 0, "dead-recent-%": 2, "rejected-recent-%": 2, "recent-%": 10} {
		if got := b.countLike(t, pattern); got != want {
			t.Errorf("%s: %d rows left, want %d", pattern, got, want)
		}
	}
}

// Under sustained load with a retention of one second, the table does not
// grow: after each of four rounds of traffic retention empties it of
// processed rows, and (vacuumed between rounds, as autovacuum would) its
// size with indexes, once it has reached its working size in the second
// round, stays there.
func TestRetentionKeepsTheTableBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := testConfig()
	cfg.Workers = 16
	if err := b.reg.HandleFunc("x", func(context.Context, *handlers.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	b.start(t, cfg)
	ret, err := NewRetention(b.db.Pool, RetentionConfig{Processed: time.Second, Interval: 200 * time.Millisecond},
		testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = ret.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	var sizes []int64
	for round := range 4 {
		for batch := range 10 {
			b.insert(t, "x", ids(fmt.Sprintf("r%d-b%d", round, batch), 500)...)
		}
		waitFor(t, 60*time.Second, "round processed and pruned", func() bool {
			var left int
			if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			return left == 0
		})
		if _, err := b.db.Pool.Exec(ctx, `VACUUM inbox`); err != nil {
			t.Fatal(err)
		}
		var size int64
		if err := b.db.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('inbox')`).Scan(&size); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, size)
		t.Logf("round %d: 5,000 rows processed and pruned; inbox with indexes: %d kB", round+1, size/1024)
	}
	if sizes[3] > sizes[1]*5/4 {
		t.Errorf("the table kept growing: %d kB after round 2, %d kB after round 4", sizes[1]/1024, sizes[3]/1024)
	}
	if got := testutil.ToFloat64(ret.metrics.deleted.WithLabelValues("processed")); got != 20000 {
		t.Errorf("deleted %v processed rows, want 20000", got)
	}
	if testutil.ToFloat64(ret.metrics.lastSuccess) == 0 {
		t.Error("no successful pass recorded")
	}
}

// Reproduction from the reliability issue: with INBOXD_DEAD_RETENTION set,
// retention deleted the dead head of a key held by on_dead: block; the row
// parked behind it then ran (the sweeper found it waiting for nothing), and
// a redelivery of the deleted row would have been processed after it.
// Retention keeps the dead rows that block a key (a key, on a route whose
// dead rows block) and deletes the other expired dead rows as before.
func TestRetentionKeepsDeadRowsThatBlockTheirKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ok := func(context.Context, *handlers.Event) error { return nil }
	for typ, onDead := range map[string]handlers.OnDead{"blk": handlers.OnDeadBlock, "skp": handlers.OnDeadSkip} {
		if err := b.reg.HandleFunc(typ, ok, handlers.Ordered(onDead)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.reg.HandleFunc("x", ok); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, key, status, attempts, last_error, updated_at) VALUES
		  ('test', 'blk-dead', 'blk', 'k', 'dead', 3, 'boom', now() - interval '2 hours'),
		  ('test', 'blk-dead-nokey', 'blk', NULL, 'dead', 3, 'boom', now() - interval '2 hours'),
		  ('test', 'skp-dead', 'skp', 'k', 'dead', 3, 'boom', now() - interval '2 hours'),
		  ('test', 'x-dead', 'x', 'k', 'dead', 3, 'boom', now() - interval '2 hours');
		INSERT INTO inbox (source, event_id, event_type, key) VALUES ('test', 'blk-next', 'blk', 'k')`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.RescueInterval = 50 * time.Millisecond // the unpark sweeper runs every tenth round
	p := b.start(t, cfg)
	waitFor(t, 10*time.Second, "blk-next parked behind the dead row", func() bool {
		return b.row(t, "blk-next").AvailableAt.Year() == 9999
	})
	r, err := NewRetention(b.db.Pool, RetentionConfig{Processed: time.Hour, Failed: time.Hour, BlockingTypes: p.BlockingTypes},
		testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.Prune(ctx, true); err != nil || res.Failed != 3 {
		t.Errorf("prune --dry-run counts %d failed rows (%v), want 3", res.Failed, err)
	}
	res, err := r.Prune(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 3 {
		t.Errorf("retention deleted %d failed rows, want 3 (all but the blocking head)", res.Failed)
	}
	for id, want := range map[string]int{"blk-dead": 1, "blk-dead-nokey": 0, "skp-dead": 0, "x-dead": 0} {
		if n := b.countLike(t, id); n != want {
			t.Errorf("%s: %d rows after retention, want %d", id, n, want)
		}
	}
	// A barrier: two unpark sweeps after the prune, then a row of another
	// key processed; the row behind the dead head must still be waiting.
	for range 2 {
		if _, err := p.Unpark(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b.insert(t, "x", "after-prune")
	waitFor(t, 10*time.Second, "a later row processed", func() bool { return b.row(t, "after-prune").Status == "processed" })
	if r := b.row(t, "blk-next"); r.Status != "received" || r.AvailableAt.Year() != 9999 {
		t.Errorf("blk-next is %s (due %s) after retention, want received and parked behind the dead head", r.Status, r.AvailableAt)
	}
}
