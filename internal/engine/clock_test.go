package engine

// Unit tests of what depends on the pool's clock, on a stubbed one: no
// waiting for the time they are about.

import (
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/clock"
	"github.com/inboxd/inboxd/worker"
)

// An open breaker keeps its route out of the claims until the pool's
// clock says its cool-down ended; then the claim plan half-opens it and
// gives the route room for one trial row.
func TestBreakerCoolDownFollowsTheClock(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	if err := reg.Handle("x", handlers.Ignore(), handlers.CircuitBreaker(2, time.Hour)); err != nil {
		t.Fatal(err)
	}
	p := unitPool(t, reg, worker.Config{Workers: 4, Prefetch: -1})
	now := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	p.clock.StubNow(now.Now)
	room := func() int {
		req, _, _ := p.claimer.plan()
		for _, r := range req.rooms {
			if r.route == "x" {
				return r.room
			}
		}
		return 0
	}
	if got := room(); got != 4 {
		t.Fatalf("room of a closed breaker's route = %d, want 4", got)
	}
	p.books.mu.Lock()
	j := &job{route: p.books.routes.byKey["x"]}
	p.books.mu.Unlock()
	p.books.routes.attemptEnded(j, false)
	p.books.routes.attemptEnded(j, false)
	if got := room(); got != 0 {
		t.Fatalf("room with the breaker open = %d, want 0", got)
	}
	now.Advance(time.Hour - time.Second)
	if got := room(); got != 0 {
		t.Fatalf("room a second before the cool-down ends = %d, want 0", got)
	}
	now.Advance(time.Second)
	if got := room(); got != 1 {
		t.Fatalf("room once the cool-down ended = %d, want 1 (half-open)", got)
	}
}

// A queued row is started only while the pool's clock leaves it more than
// the start margin of its lease; past that it is given back at risk.
func TestDispatchChecksTheLeaseOnTheClock(t *testing.T) {
	t.Parallel()
	p := unitPool(t, handlers.NewRegistry(), worker.Config{Workers: 1, Lease: 30 * time.Second})
	now := clock.NewManual(time.Now())
	p.clock.StubNow(now.Now)
	j := newJob(p, 1, "x", 7)
	j.leaseUntil = now.Now().Add(30 * time.Second)
	// The start margin is a third of the lease: 10s. 21s on, 9s are left.
	now.Advance(21 * time.Second)
	p.books.track([]*job{j})
	r := nextResult(t, p)
	if r.id != 1 || r.outcome != outcomeReleased {
		t.Fatalf("outcome %+v, want the row given back unstarted", r)
	}
	if !p.executor.wait(10*time.Second, nil) {
		t.Fatal("a handler ran")
	}
}
