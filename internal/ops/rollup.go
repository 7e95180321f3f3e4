package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/maintenance"
)

// Window is the span of time a throughput series covers: WindowHour (a
// point per minute), WindowDay or WindowWeek (a point per hour).
type Window string

// The windows.
const (
	WindowHour Window = "hour"
	WindowDay  Window = "day"
	WindowWeek Window = "week"
)

// Point is a route's figures over one minute or hour.
type Point struct {
	At                       time.Time
	Processed, Retried, Dead int64
	// P50 and P99 are the processed rows' latency from received to
	// processed (bucket bounds: maintenance.LatencyBounds); zero without
	// processed rows.
	P50, P99 time.Duration
}

// Series is one route's figures over a window: a point per minute or hour
// that had any outcome, and the window's totals.
type Series struct {
	Route  string
	Points []Point
	// Total is the whole window's figures (At is the window's start).
	Total Point
}

// Throughput returns, for each route (or the one route given), its
// throughput, failures and latency percentiles over the window, from the
// per-route rollup that the engine's maintenance writes (never a scan of
// the inbox), routes in name order.
func (o *Ops) Throughput(ctx context.Context, w Window, route string) ([]Series, error) {
	span, back := driver.SpanMinute, time.Hour
	switch w {
	case WindowHour:
	case WindowDay:
		span, back = driver.SpanHour, 24*time.Hour
	case WindowWeek:
		span, back = driver.SpanHour, 7*24*time.Hour
	default:
		return nil, fmt.Errorf("no window %q: hour, day or week", w)
	}
	since := time.Now().Add(-back).Truncate(time.Duration(span) * time.Second)
	cells, err := driver.ReadRollup(ctx, o.cfg.DB, span, since, route)
	if err != nil {
		return nil, err
	}
	byRoute := map[string]*Series{}
	totals := map[string][]int64{}
	var order []string
	for _, c := range cells {
		s, ok := byRoute[c.Route]
		if !ok {
			s = &Series{Route: c.Route, Total: Point{At: since}}
			byRoute[c.Route] = s
			totals[c.Route] = make([]int64, len(c.Latency))
			order = append(order, c.Route)
		}
		s.Points = append(s.Points, Point{At: c.At, Processed: c.Processed, Retried: c.Retried, Dead: c.Dead,
			P50: maintenance.Percentile(c.Latency, 0.5), P99: maintenance.Percentile(c.Latency, 0.99)})
		s.Total.Processed += c.Processed
		s.Total.Retried += c.Retried
		s.Total.Dead += c.Dead
		t := totals[c.Route]
		for i := range c.Latency {
			if i < len(t) {
				t[i] += c.Latency[i]
			}
		}
	}
	out := make([]Series, 0, len(order))
	sortStrings(order)
	for _, r := range order {
		s := byRoute[r]
		s.Total.P50, s.Total.P99 = maintenance.Percentile(totals[r], 0.5), maintenance.Percentile(totals[r], 0.99)
		out = append(out, *s)
	}
	return out, nil
}
