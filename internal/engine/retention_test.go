package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/worker"
)

// Under sustained load with a retention of one second, the table does not
// grow: after each of four rounds of traffic retention empties it of
// processed rows, and (vacuumed between rounds, as autovacuum would) its
// heap, once it has reached its working size in the second round, stays
// there. The indexes' size is logged, not held: PostgreSQL 15 recycles a
// deleted b-tree page only once no transaction of the whole cluster is
// older than its deletion (the shared horizon, not the database's), so any
// long transaction of another test's database keeps the freed pages out of
// reach; the heap's space is this database's alone.
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
	reg := prometheus.NewRegistry()
	ret, err := maintenance.NewRetention(b.db.Pool, worker.RetentionConfig{Processed: time.Second, Interval: 200 * time.Millisecond},
		testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = startstop.Run(rctx, ret) }()
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
		var size, indexes int64
		if err := b.db.Pool.QueryRow(ctx, `SELECT pg_table_size('inbox'), pg_indexes_size('inbox')`).Scan(&size, &indexes); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, size)
		t.Logf("round %d: 5,000 rows processed and pruned; inbox's heap: %d kB (its indexes: %d kB)", round+1, size/1024, indexes/1024)
	}
	if sizes[3] > sizes[1]*5/4 {
		t.Errorf("the table kept growing: %d kB after round 2, %d kB after round 4", sizes[1]/1024, sizes[3]/1024)
	}
	if got := gathered(t, reg, "inboxd_retention_deleted_rows_total", "status", "processed"); got != 20000 {
		t.Errorf("deleted %v processed rows, want 20000", got)
	}
	if gathered(t, reg, "inboxd_retention_last_success_timestamp_seconds") == 0 {
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
	r, err := maintenance.NewRetention(b.db.Pool, worker.RetentionConfig{Processed: time.Hour, Failed: time.Hour, BlockingTypes: p.BlockingTypes},
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

// gathered is the value of the metric name in g, of the series with the
// label pairs given (none: the metric's only series).
func gathered(t *testing.T, g prometheus.Gatherer, name string, labelPairs ...string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labelPairs); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labelPairs[i] && l.GetValue() == labelPairs[i+1]
				}) {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no series of %s with %v", name, labelPairs)
	return 0
}
