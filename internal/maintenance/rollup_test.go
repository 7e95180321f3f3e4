package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// Two replicas' tallies add up in the rollup, per minute and per hour,
// latency histograms included; a failed write keeps the counts.
func TestRollupAddsEveryReplicasTally(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	at := time.Now().Truncate(time.Minute).Add(10 * time.Second)
	a, b := NewTally(), NewTally()
	a.Add(at, Outcome{Route: "order.created", Processed: true, Latency: 3 * time.Millisecond},
		Outcome{Route: "order.created", Retried: true}, Outcome{Route: "order.paid", Dead: true})
	b.Add(at, Outcome{Route: "order.created", Processed: true, Latency: 900 * time.Millisecond},
		Outcome{Route: "order.created", Processed: true, Latency: 3 * time.Millisecond})
	ra, rb := NewRollup(db.Pool, a, time.Hour, testLogger(t), nil), NewRollup(db.Pool, b, time.Hour, testLogger(t), nil)
	_ = ra.Flush(ctx)
	_ = rb.Flush(ctx)
	for _, span := range []int{driver.SpanMinute, driver.SpanHour} {
		cells, err := driver.ReadRollup(ctx, db.Pool, span, at.Add(-2*time.Hour), "order.created")
		if err != nil || len(cells) != 1 {
			t.Fatalf("span %d: %+v %v", span, cells, err)
		}
		c := cells[0]
		if c.Processed != 3 || c.Retried != 1 || c.Dead != 0 {
			t.Errorf("span %d: %+v", span, c)
		}
		if p50, p99 := Percentile(c.Latency, 0.5), Percentile(c.Latency, 0.99); p50 < 3*time.Millisecond || p50 > 4*time.Millisecond ||
			p99 < 900*time.Millisecond || p99 > 1200*time.Millisecond {
			t.Errorf("span %d: p50 %s, p99 %s", span, p50, p99)
		}
	}
	// A round that cannot write keeps its counts for the next.
	a.Add(at, Outcome{Route: "order.paid", Dead: true})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_ = ra.Flush(cctx)
	_ = ra.Flush(ctx)
	cells, err := driver.ReadRollup(ctx, db.Pool, driver.SpanMinute, at.Add(-time.Hour), "order.paid")
	if err != nil || len(cells) != 1 || cells[0].Dead != 2 {
		t.Fatalf("after a failed round: %+v %v", cells, err)
	}
	// Old cells go.
	if _, err := db.Pool.Exec(ctx, "UPDATE route_rollup SET at = at - interval '9 days'"); err != nil {
		t.Fatal(err)
	}
	if n, err := driver.PruneRollup(ctx, db.Pool, RollupMinutesKept, RollupHoursKept); err != nil || n != 4 {
		t.Fatalf("pruned %d (%v), want 4", n, err)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	counts := make([]int64, len(LatencyBounds)+1)
	counts[latencyBucket(time.Millisecond)] = 99
	counts[latencyBucket(time.Hour)] = 1
	if p := Percentile(counts, 0.5); p < time.Millisecond || p > 1300*time.Microsecond {
		t.Errorf("p50 %s", p)
	}
	if p := Percentile(counts, 1); p != LatencyBounds[len(LatencyBounds)-1] {
		t.Errorf("p100 %s", p)
	}
	if Percentile(make([]int64, 3), 0.5) != 0 {
		t.Error("an empty histogram")
	}
}

// BenchmarkTallyAdd is the rollup's cost on the hot path: a completion
// batch's outcomes counted under one lock (per row: ns/op / 100).
func BenchmarkTallyAdd(b *testing.B) {
	t := NewTally()
	batch := make([]Outcome, 100)
	for i := range batch {
		batch[i] = Outcome{Route: "order.created", Processed: true, Latency: time.Duration(i) * time.Millisecond}
	}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		t.Add(now, batch...)
	}
}

// The histories of deleted rows are swept; a row that stays keeps its own.
func TestSweepAttemptsOfDeletedRows(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var kept int64
	if err := db.Pool.QueryRow(ctx, "INSERT INTO inbox (source, event_id, event_type, status) VALUES ('s', 'e', 't', 'dead') RETURNING id").Scan(&kept); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	var list []driver.Attempt
	for id := kept; id < kept+2500; id++ { // kept, and 2,499 rows that are gone
		list = append(list, driver.Attempt{RowID: id, Attempt: 1, StartedAt: old, FinishedAt: old.Add(time.Duration(id) * time.Millisecond), Outcome: "dead"})
	}
	if err := driver.RecordAttempts(ctx, db.Pool, "w", list); err != nil {
		t.Fatal(err)
	}
	r := NewRollup(db.Pool, NewTally(), time.Hour, testLogger(t), nil)
	r.sweepAttempts(ctx)
	var n int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM inbox_attempts").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d entries left (%v), want the kept row's 1", n, err)
	}
	if h, err := driver.History(ctx, db.Pool, kept); err != nil || len(h) != 1 {
		t.Fatalf("the kept row's history: %+v %v", h, err)
	}
}
