package driver

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// Pausing is shared state: listed until resumed; a second pause keeps the
// first pauser; resuming a route that is not paused says so.
func TestPauseAndResumeRoutes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	if err := PauseRoute(ctx, db, "order.paid", "alice", "provider down"); err != nil {
		t.Fatal(err)
	}
	if err := PauseRoute(ctx, db, "order.paid", "bob", "still down"); err != nil {
		t.Fatal(err)
	}
	if err := PauseRoute(ctx, db, DefaultRoute, "alice", ""); err != nil {
		t.Fatal(err)
	}
	got, err := PausedRoutes(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Route != DefaultRoute || got[1].Route != "order.paid" || got[1].PausedBy != "alice" ||
		got[1].Reason != "still down" || got[1].PausedAt.IsZero() {
		t.Fatalf("paused routes = %+v", got)
	}
	if was, err := ResumeRoute(ctx, db, "order.paid"); err != nil || !was {
		t.Fatalf("resume: %v, %v", was, err)
	}
	if was, err := ResumeRoute(ctx, db, "order.paid"); err != nil || was {
		t.Fatalf("second resume: %v, %v; want not paused", was, err)
	}
	if got, _ := PausedRoutes(ctx, db); len(got) != 1 {
		t.Fatalf("after resume: %+v", got)
	}
}

// A bucket starts full, grants what it holds and no more, refills at its
// rate up to its burst, and takes back what a claim did not use; replicas
// taking at once never get more than it holds.
func TestRouteTokens(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	want := func(n int) []TokenWant { return []TokenWant{{Route: "a", Rate: 0.001, Burst: 10, Want: n}} }
	got, err := TakeTokens(ctx, db, want(4))
	if err != nil || got["a"] != 4 {
		t.Fatalf("first take: %v, %v; want 4 of a full bucket", got, err)
	}
	if got, _ := TakeTokens(ctx, db, want(100)); got["a"] != 6 {
		t.Fatalf("second take: %v; want the 6 left", got)
	}
	if got, _ := TakeTokens(ctx, db, want(1)); got["a"] != 0 {
		t.Fatalf("empty bucket granted %v", got)
	}
	if err := GiveTokens(ctx, db, want(3)); err != nil {
		t.Fatal(err)
	}
	if err := GiveTokens(ctx, db, want(30)); err != nil {
		t.Fatal(err)
	}
	// Given back 33, held 10 at most.
	var total atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			got, err := TakeTokens(ctx, db, want(3))
			if err != nil {
				t.Error(err)
			}
			total.Add(int64(got["a"]))
		})
	}
	wg.Wait()
	if total.Load() != 10 {
		t.Fatalf("concurrent takes got %d tokens of a bucket of 10", total.Load())
	}
	// Refill: 1000 a second, burst 5.
	fast := []TokenWant{{Route: "a", Rate: 1000, Burst: 5, Want: 50}}
	testkit.WaitFor(t, 5*time.Second, "the bucket refilled to its burst", func() bool {
		got, err := TakeTokens(ctx, db, fast)
		return err == nil && got["a"] == 5
	})
}
