package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
)

// countTypeStatus counts the rows of eventType in status.
func (b *bundle) countTypeStatus(t testing.TB, eventType, status string) int {
	t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM inbox WHERE event_type = $1 AND status = $2`, eventType, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// pausedGauge is p's inboxd_route_paused for label.
func pausedGauge(p *Pool, label string) float64 {
	return testutil.ToFloat64(p.metrics.routePaused.WithLabelValues(label))
}

// A route paused before the replicas start is not claimed by either of
// two replicas, while other routes' rows are processed; its rows stay
// received (the stale gauges see them) until it is resumed, and then they
// are processed. A pause while running (here of the default route) takes
// effect on both within a second or so, and shows in inboxd_route_paused.
func TestPauseRouteAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, typ := range []string{"held", "free"} {
		if err := b.reg.Handle(typ, handlers.Ignore()); err != nil {
			t.Fatal(err)
		}
	}
	b.reg.SetDefault(handlers.Ignore())
	if err := driver.PauseRoute(ctx, b.db.Pool, "held", "test", "provider down"); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "held", ids("held", 50)...)
	b.insert(t, "free", ids("free", 50)...)
	cfg := testConfig()
	pools := []*runningPool{b.start(t, cfg), b.start(t, cfg)}
	waitFor(t, 10*time.Second, "the free route's rows processed", func() bool {
		return b.countTypeStatus(t, "free", "processed") == 50
	})
	// Claims went round since (the claim loop polls every 50 ms): the held
	// rows were left.
	for i, p := range pools {
		since := time.Now()
		waitFor(t, 5*time.Second, "a claim loop round", func() bool { return p.Progress().After(since.Add(100 * time.Millisecond)) })
		if g := pausedGauge(p.Pool, "held"); g != 1 {
			t.Errorf("replica %d: inboxd_route_paused{route=held} = %v, want 1", i, g)
		}
		if g := pausedGauge(p.Pool, "free"); g != 0 {
			t.Errorf("replica %d: inboxd_route_paused{route=free} = %v, want 0", i, g)
		}
	}
	if n := b.countTypeStatus(t, "held", "received"); n != 50 {
		t.Fatalf("%d rows of the paused route still received, want 50", n)
	}
	stats, err := driver.ReadStats(ctx, b.db.Pool, time.Nanosecond)
	if err != nil || stats.Stale < 50 {
		t.Fatalf("stale rows %d (%v): the paused route's rows must stay visible", stats.Stale, err)
	}

	if was, err := driver.ResumeRoute(ctx, b.db.Pool, "held"); err != nil || !was {
		t.Fatalf("resume: %v %v", was, err)
	}
	resumed := time.Now()
	waitFor(t, 10*time.Second, "the resumed route's rows processed", func() bool {
		return b.countTypeStatus(t, "held", "processed") == 50
	})
	if took := time.Since(resumed); took > 3*time.Second {
		t.Errorf("resumed route took %v to drain", took)
	}

	// Pause the default route while running.
	if err := driver.PauseRoute(ctx, b.db.Pool, driver.DefaultRoute, "test", ""); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	for _, p := range pools {
		waitFor(t, 5*time.Second, "the default route paused on every replica", func() bool { return pausedGauge(p.Pool, "other") == 1 })
	}
	if took := time.Since(paused); took > 1500*time.Millisecond {
		t.Errorf("the pause took %v to reach both replicas", took)
	}
	b.insert(t, "unrouted", ids("unrouted", 20)...)
	b.insert(t, "free", ids("free2", 20)...)
	waitFor(t, 10*time.Second, "the free route's new rows processed", func() bool {
		return b.countTypeStatus(t, "free", "processed") == 70
	})
	for _, p := range pools {
		since := time.Now()
		waitFor(t, 5*time.Second, "a claim loop round", func() bool { return p.Progress().After(since.Add(100 * time.Millisecond)) })
	}
	if n := b.countTypeStatus(t, "unrouted", "received"); n != 20 {
		t.Fatalf("%d rows of the paused default route still received, want 20", n)
	}
	if _, err := driver.ResumeRoute(ctx, b.db.Pool, driver.DefaultRoute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the default route's rows processed", func() bool {
		return b.countTypeStatus(t, "unrouted", "processed") == 20
	})
}

// A pause lets the rows in flight finish: a handler running when its
// route is paused completes, and its row is processed.
func TestPauseRouteLetsRowsInFlightFinish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	started, release := make(chan struct{}, 1), make(chan struct{})
	if err := b.reg.HandleFunc("slow", func(ctx context.Context, _ *handlers.Event) error {
		started <- struct{}{}
		<-release
		return nil
	}, handlers.Concurrency(1)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Prefetch = -1
	p := b.start(t, cfg)
	b.insert(t, "slow", "a", "b")
	<-started
	if err := driver.PauseRoute(ctx, b.db.Pool, "slow", "test", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the route paused", func() bool { return pausedGauge(p.Pool, "slow") == 1 })
	close(release)
	waitFor(t, 5*time.Second, "the row in flight processed", func() bool { return b.row(t, "a").Status == "processed" })
	since := time.Now()
	waitFor(t, 5*time.Second, "a claim loop round", func() bool { return p.Progress().After(since.Add(100 * time.Millisecond)) })
	if st := b.row(t, "b").Status; st != "received" {
		t.Fatalf("row b is %s while its route is paused, want received", st)
	}
}

// A route limited to 50 rows a second gets at most about that from the
// whole fleet, three replicas as from one: over four seconds the rows
// processed are within [0.8, 1.15] of 50/s × the time plus the burst.
func TestRateLimitAcrossReplicas(t *testing.T) {
	t.Parallel()
	for _, replicas := range []int{1, 3} {
		t.Run(map[int]string{1: "one replica", 3: "three replicas"}[replicas], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			const rate, burst = 50, 50
			if err := b.reg.Handle("limited", handlers.Ignore(), handlers.RateLimit(rate, 0)); err != nil {
				t.Fatal(err)
			}
			if err := b.reg.Handle("free", handlers.Ignore()); err != nil {
				t.Fatal(err)
			}
			b.insert(t, "limited", ids("limited", 2000)...)
			b.insert(t, "free", ids("free", 200)...)
			cfg := testConfig()
			from := time.Now()
			pools := make([]*runningPool, replicas)
			for i := range pools {
				pools[i] = b.start(t, cfg)
			}
			// The measurement window itself: not a wait for a condition.
			<-time.After(4 * time.Second)
			n := b.countTypeStatus(t, "limited", "processed")
			elapsed := time.Since(from).Seconds()
			want := rate*elapsed + burst
			ratio := float64(n) / want
			t.Logf("%d replicas: %d rows in %.2fs, %.1f/s; expected at most %.0f (ratio %.2f)", replicas, n, elapsed, float64(n)/elapsed, want, ratio)
			if ratio < 0.8 || ratio > 1.15 {
				t.Errorf("processed %d rows of the limited route in %.2fs, want within [0.8, 1.15] × %.0f", n, elapsed, want)
			}
			if free := b.countTypeStatus(t, "free", "processed"); free != 200 {
				t.Errorf("the unlimited route processed %d of 200 rows: the limit must not hold it back", free)
			}
			cut := 0.0
			for _, p := range pools {
				cut += testutil.ToFloat64(p.metrics.routeRateLimited.WithLabelValues("limited"))
			}
			if cut == 0 {
				t.Errorf("inboxd_route_rate_limited_total{route=limited} stayed 0")
			}
		})
	}
}

// After failures consecutive failed attempts the route's breaker opens:
// no claims of its rows on the replica for the cool-down; then one trial
// row (half-open), whose failure opens it again and whose success closes
// it, and the rows drain. inboxd_route_breaker_state follows.
func TestRouteBreaker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const coolDown = 700 * time.Millisecond
	var failing atomic.Bool
	var attempts atomic.Int64
	failing.Store(true)
	if err := b.reg.HandleFunc("flaky", func(context.Context, *handlers.Event) error {
		attempts.Add(1)
		if failing.Load() {
			return errors.New("provider down")
		}
		return nil
	}, handlers.Concurrency(1), handlers.MaxAttempts(1000), handlers.Backoff(time.Millisecond, 5*time.Millisecond),
		handlers.CircuitBreaker(3, coolDown)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Prefetch = -1
	p := b.start(t, cfg)
	state := func() float64 { return testutil.ToFloat64(p.metrics.routeBreaker.WithLabelValues("flaky")) }
	if s := state(); s != 0 {
		t.Fatalf("breaker state %v before any failure, want 0 (closed)", s)
	}
	b.insert(t, "flaky", ids("flaky", 10)...)
	waitFor(t, 5*time.Second, "the breaker open", func() bool { return state() == 1 })
	opened := time.Now()
	atOpen := attempts.Load()
	if atOpen < 3 {
		t.Fatalf("breaker opened after %d attempts, want 3", atOpen)
	}
	waitFor(t, 5*time.Second, "the breaker half-open", func() bool { return state() == 2 || attempts.Load() > atOpen+1 })
	if took := time.Since(opened); took < coolDown-300*time.Millisecond {
		t.Errorf("breaker left open after %v, before its cool-down of %v", took, coolDown)
	}
	// One row may have been claimed as the breaking attempt returned.
	if n := attempts.Load() - atOpen; n > 2 {
		t.Errorf("%d attempts while the breaker was open (or its one trial), want at most 2", n)
	}
	// The trial row fails: open again.
	waitFor(t, 5*time.Second, "the breaker open again after the trial failed", func() bool { return state() == 1 })
	failing.Store(false)
	waitFor(t, 10*time.Second, "the breaker closed after a trial succeeded", func() bool { return state() == 0 })
	waitFor(t, 10*time.Second, "every row processed", func() bool { return b.countTypeStatus(t, "flaky", "processed") == 10 })
}

// routeRate is p's rate limit of the route key as its books hold it.
func routeRate(p *Pool, key string) (rate float64, burst int) {
	p.books.mu.Lock()
	defer p.books.mu.Unlock()
	rs := p.books.routes.byKey[key]
	if rs == nil {
		return -1, -1
	}
	return rs.policy.Rate, rs.policy.Burst
}

// An operator's rate override reaches both replicas on one database
// within a second or so and replaces the route's own rate (200/s) on
// both: the fleet processes the route at the override's rate (20/s, burst
// 5). Cleared, both go back to the route's own rate and the rows drain.
func TestRateOverrideAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := b.reg.Handle("limited", handlers.Ignore(), handlers.RateLimit(200, 0)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	pools := []*runningPool{b.start(t, cfg), b.start(t, cfg)}
	for i, p := range pools {
		if r, bu := routeRate(p.Pool, "limited"); r != 200 || bu != 200 {
			t.Fatalf("replica %d: rate %v burst %d before the override, want the route's own 200/200", i, r, bu)
		}
	}
	const rate, burst = 20, 5
	if err := driver.SetRouteRate(ctx, b.db.Pool, "limited", rate, burst, "test"); err != nil {
		t.Fatal(err)
	}
	set := time.Now()
	for i, p := range pools {
		waitFor(t, 5*time.Second, fmt.Sprintf("replica %d at the override", i), func() bool {
			r, bu := routeRate(p.Pool, "limited")
			return r == rate && bu == burst
		})
	}
	if took := time.Since(set); took > 1500*time.Millisecond {
		t.Errorf("the override took %v to reach both replicas", took)
	}
	b.insert(t, "limited", ids("limited", 1000)...)
	from := time.Now()
	// The measurement window itself: not a wait for a condition.
	<-time.After(3 * time.Second)
	n := b.countTypeStatus(t, "limited", "processed")
	want := rate*time.Since(from).Seconds() + burst
	t.Logf("%d rows in the window at the override, expected at most %.0f (ratio %.2f)", n, want, float64(n)/want)
	if ratio := float64(n) / want; ratio < 0.7 || ratio > 1.2 {
		t.Errorf("processed %d rows at the override, want within [0.7, 1.2] × %.0f", n, want)
	}

	if was, err := driver.ClearRouteRate(ctx, b.db.Pool, "limited"); err != nil || !was {
		t.Fatalf("clear: %v %v", was, err)
	}
	for i, p := range pools {
		waitFor(t, 5*time.Second, fmt.Sprintf("replica %d back at the route's rate", i), func() bool {
			r, bu := routeRate(p.Pool, "limited")
			return r == 200 && bu == 200
		})
	}
	waitFor(t, 20*time.Second, "the rows drained at the route's own rate", func() bool {
		return b.countTypeStatus(t, "limited", "processed") == 1000
	})
	// A route without a rate of its own gets one from an override, and
	// none again once it is cleared; the override of a burst left out is
	// one second's worth.
	if err := driver.SetRouteRate(ctx, b.db.Pool, driver.DefaultRoute, 2.5, 0, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the default route limited", func() bool {
		r, bu := routeRate(pools[1].Pool, "")
		return r == 2.5 && bu == 3
	})
	if _, err := driver.ClearRouteRate(ctx, b.db.Pool, driver.DefaultRoute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the default route unlimited", func() bool {
		r, bu := routeRate(pools[1].Pool, "")
		return r == 0 && bu == 0
	})
}

// A breaker reset closes the open breaker of both replicas on one
// database within a second or so, long before its cool-down (an hour),
// and the route's rows drain; it closes it once: failures open it again.
func TestBreakerResetAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var failing atomic.Bool
	failing.Store(true)
	if err := b.reg.HandleFunc("flaky", func(context.Context, *handlers.Event) error {
		if failing.Load() {
			return errors.New("provider down")
		}
		return nil
	}, handlers.Concurrency(1), handlers.MaxAttempts(1000), handlers.Backoff(time.Millisecond, 5*time.Millisecond),
		handlers.CircuitBreaker(2, time.Hour)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Prefetch = -1
	pools := []*runningPool{b.start(t, cfg), b.start(t, cfg)}
	state := func(p *runningPool) float64 {
		return testutil.ToFloat64(p.metrics.routeBreaker.WithLabelValues("flaky"))
	}
	b.insert(t, "flaky", ids("flaky", 20)...)
	for i, p := range pools {
		waitFor(t, 10*time.Second, fmt.Sprintf("replica %d's breaker open", i), func() bool { return state(p) == 1 })
	}
	failing.Store(false)
	if _, err := driver.ResetRouteBreaker(ctx, b.db.Pool, "flaky", "test"); err != nil {
		t.Fatal(err)
	}
	reset := time.Now()
	for i, p := range pools {
		waitFor(t, 5*time.Second, fmt.Sprintf("replica %d's breaker closed by the reset", i), func() bool { return state(p) == 0 })
	}
	if took := time.Since(reset); took > 1500*time.Millisecond {
		t.Errorf("the reset took %v to reach both replicas", took)
	}
	waitFor(t, 10*time.Second, "every row processed", func() bool { return b.countTypeStatus(t, "flaky", "processed") == 20 })

	// Once: the reset is not read again, and new failures open it again.
	failing.Store(true)
	b.insert(t, "flaky", ids("again", 20)...)
	for i, p := range pools {
		waitFor(t, 10*time.Second, fmt.Sprintf("replica %d's breaker open again", i), func() bool { return state(p) == 1 })
	}
	since := time.Now()
	for _, p := range pools {
		waitFor(t, 5*time.Second, "a controls round", func() bool { return p.Progress().After(since.Add(time.Second)) })
		if s := state(p); s != 1 {
			t.Errorf("breaker state %v a second later, want 1 (open): the old reset closed it again", s)
		}
	}
}
