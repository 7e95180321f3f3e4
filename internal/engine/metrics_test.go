package engine

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// Outcome metrics carry the event type, bounded by the routes: a routed type
// is its own label value; every unrouted type shares "other", so a producer
// inventing types cannot grow the label set.
func TestEventTypeLabelsAreBoundedByRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.reg.HandleFunc("order.created", func(context.Context, *handlers.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "order.created", ids("o", 3)...)
	for i, typ := range []string{"made.up.1", "made.up.2", "made.up.3"} {
		b.insert(t, typ, ids(typ, i+1)...)
	}
	reg := prometheus.NewRegistry()
	dbPool := poolOf(t, b.db.URL, 4)
	p, err := New(dbPool, b.reg, testConfig(), testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	runPool(t, p)
	waitFor(t, 10*time.Second, "every row finished", func() bool {
		return b.countStatus(t, "processed") == 3 && b.countStatus(t, "dead") == 6
	})
	// The completer counts a batch once it committed: the rows may show
	// their status a moment before the counters do.
	waitFor(t, 10*time.Second, "every outcome counted", func() bool {
		// Summed over every series, so that no label value is made here.
		var n float64
		ch := make(chan prometheus.Metric, 16)
		go func() { p.metrics.completed.Collect(ch); close(ch) }()
		for m := range ch {
			var d dto.Metric
			if err := m.Write(&d); err == nil {
				n += d.GetCounter().GetValue()
			}
		}
		return n >= 9
	})
	if got := testutil.ToFloat64(p.metrics.completed.WithLabelValues(outcomeProcessed, "order.created")); got != 3 {
		t.Errorf("processed{event_type=order.created} = %v, want 3", got)
	}
	if got := testutil.ToFloat64(p.metrics.completed.WithLabelValues(outcomeDead, otherEventTypes)); got != 6 {
		t.Errorf("dead{event_type=other} = %v, want 6 (the unrouted types together)", got)
	}
	if n := testutil.CollectAndCount(p.metrics.completed); n != 2 {
		t.Errorf("completed has %d series, want 2: unrouted types must not add label values", n)
	}
}

// The gauges show what the alerts need within one refresh: a row received
// two hours ago and waiting in backoff counts in the oldest-received age and
// the stale rows (the oldest-due age stays 0: it is not due), and a dead row
// shows as a level.
func TestGaugesSeeRowsInBackoffAndDeadRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, received_at, available_at, attempts, last_error)
		VALUES ('test', 'waiting', 'x', now() - interval '2 hours', now() + interval '1 hour', 3, 'upstream down');
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error)
		VALUES ('test', 'gone', 'x', 'dead', 10, 'attempt 10 of 10: boom')`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.StatsInterval = 100 * time.Millisecond
	cfg.StaleAfter = 5 * time.Minute
	p := b.start(t, cfg)
	waitFor(t, 5*time.Second, "gauges refreshed", func() bool {
		return testutil.ToFloat64(p.metrics.maintenance.Rows.WithLabelValues(string(status.Dead))) == 1
	})
	if got := testutil.ToFloat64(p.metrics.maintenance.StaleRows); got != 1 {
		t.Errorf("stale rows = %v, want 1 (the row in backoff)", got)
	}
	if got := testutil.ToFloat64(p.metrics.maintenance.OldestReceived); got < 7200 || got > 7300 {
		t.Errorf("oldest received age = %vs, want about 2h", got)
	}
	if got := testutil.ToFloat64(p.metrics.maintenance.OldestReady); got != 0 {
		t.Errorf("oldest due age = %vs, want 0: the row is not due", got)
	}
	if got := testutil.ToFloat64(p.metrics.maintenance.Rows.WithLabelValues(string(status.Received))); got != 1 {
		t.Errorf("received rows = %v, want 1", got)
	}
}
