package ops

import (
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/maintenance"
)

// Throughput reads the rollup: per route, a point per minute (hour) or
// hour (day, week), with totals and latency percentiles.
func TestThroughputFromTheRollup(t *testing.T) {
	b := setup(t)
	now := time.Now().UTC()
	lat := func(d time.Duration, n int64) []int64 {
		c := make([]int64, len(maintenance.LatencyBounds)+1)
		for i, bound := range maintenance.LatencyBounds {
			if d <= bound {
				c[i] = n
				return c
			}
		}
		return c
	}
	var cells []driver.RollupCell
	for i := 0; i < 3; i++ {
		at := now.Truncate(time.Minute).Add(-time.Duration(i) * time.Minute)
		cells = append(cells, driver.RollupCell{Span: driver.SpanMinute, At: at, Route: "order.created", Processed: 10, Retried: 1, Latency: lat(2*time.Millisecond, 10)})
	}
	cells = append(cells,
		driver.RollupCell{Span: driver.SpanMinute, At: now.Truncate(time.Minute).Add(-2 * time.Hour), Route: "order.created", Processed: 99, Latency: lat(time.Second, 99)},
		driver.RollupCell{Span: driver.SpanHour, At: now.Truncate(time.Hour), Route: "order.created", Processed: 30, Retried: 3, Latency: lat(2*time.Millisecond, 30)},
		driver.RollupCell{Span: driver.SpanHour, At: now.Truncate(time.Hour).Add(-48 * time.Hour), Route: "order.paid", Dead: 5, Latency: lat(0, 0)})
	if err := driver.AddRollup(b.ctx, b.pool, cells); err != nil {
		t.Fatal(err)
	}
	hour, err := b.ops.Throughput(b.ctx, WindowHour, "")
	if err != nil || len(hour) != 1 || len(hour[0].Points) != 3 || hour[0].Total.Processed != 30 || hour[0].Total.Retried != 3 {
		t.Fatalf("hour: %+v %v", hour, err)
	}
	if p := hour[0].Total.P50; p < 2*time.Millisecond || p > 3*time.Millisecond {
		t.Errorf("hour p50 %s", p)
	}
	week, err := b.ops.Throughput(b.ctx, WindowWeek, "")
	if err != nil || len(week) != 2 || week[0].Route != "order.created" || week[1].Total.Dead != 5 {
		t.Fatalf("week: %+v %v", week, err)
	}
	day, err := b.ops.Throughput(b.ctx, WindowDay, "order.paid")
	if err != nil || len(day) != 0 {
		t.Fatalf("day of order.paid (48 h ago): %+v %v", day, err)
	}
	if _, err := b.ops.Throughput(b.ctx, "month", ""); err == nil {
		t.Fatal("a month window")
	}
}
