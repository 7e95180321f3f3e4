package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// Handlers that finish within the shutdown budget complete normally.
func TestShutdownLetsInFlightFinish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	if err := b.reg.HandleFunc("x", func(context.Context, *handlers.Event) error {
		entered <- struct{}{}
		<-release
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "x", ids("e", 4)...)
	p := b.start(t, testConfig()) // 4 workers
	for range 4 {
		<-entered
	}
	p.cancel() // stop claiming; handlers still hold their rows
	if p.wait(100 * time.Millisecond) {
		t.Fatal("Run returned while handlers were still running within budget")
	}
	close(release)
	p.stop(t)
	if n := b.countStatus(t, "processed"); n != 4 {
		t.Fatalf("processed = %d, want 4", n)
	}
	if n := b.countStatus(t, "processing"); n != 0 {
		t.Fatalf("%d rows left in processing", n)
	}
}

// Handlers still running when the budget is spent are cancelled and their
// rows released: received, due now, attempt not counted.
func TestShutdownReleasesCancelledRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entered := make(chan struct{}, 4)
	if err := b.reg.HandleFunc("x", func(ctx context.Context, _ *handlers.Event) error {
		entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "x", ids("e", 6)...)
	cfg := testConfig()
	cfg.ShutdownTimeout = 200 * time.Millisecond
	p := b.start(t, cfg)
	for range 4 {
		<-entered
	}
	p.stop(t)
	if n := b.countStatus(t, "processing"); n != 0 {
		t.Fatalf("%d rows left in processing after shutdown", n)
	}
	if n := b.countStatus(t, "received"); n != 6 {
		t.Fatalf("received = %d, want all 6", n)
	}
	for _, id := range ids("e", 6) {
		r := b.row(t, id)
		if r.Attempts != 0 || r.LeaseToken != nil || r.AvailableAt.After(time.Now().Add(time.Second)) {
			t.Fatalf("row %s not released cleanly: %+v", id, r)
		}
		if r.LastError != nil && !strings.Contains(*r.LastError, "released") {
			t.Fatalf("row %s last_error %q", id, *r.LastError)
		}
	}
}

// A handler that ignores cancellation cannot hold the shutdown or its row:
// the row is released anyway and the handler's late completion is fenced.
func TestShutdownReleasesRowsOfStuckHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entered := make(chan struct{})
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	if err := b.reg.HandleFunc("x", func(context.Context, *handlers.Event) error {
		close(entered)
		<-stuck // ignores ctx
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "x", "e-1")
	cfg := testConfig()
	cfg.ShutdownTimeout = 100 * time.Millisecond
	p := b.start(t, cfg)
	<-entered
	p.stop(t)
	if r := b.row(t, "e-1"); r.Status != "received" || r.Attempts != 0 {
		t.Fatalf("row = %+v, want released", r)
	}
}

// Rows claimed ahead (prefetched) but not started go back at once when
// shutdown begins, without waiting for the running handlers.
func TestShutdownReleasesPrefetchedRowsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entered := make(chan struct{}, 3)
	release := make(chan struct{})
	if err := b.reg.HandleFunc("x", func(context.Context, *handlers.Event) error {
		entered <- struct{}{}
		<-release
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Workers, cfg.Prefetch = 1, 4
	b.insert(t, "x", ids("e", 3)...)
	p := b.start(t, cfg)
	<-entered
	waitFor(t, 5*time.Second, "all three rows claimed", func() bool { return b.countStatus(t, "processing") == 3 })

	p.cancel() // shutdown begins; the running handler is still blocked
	waitFor(t, 5*time.Second, "queued rows released", func() bool { return b.countStatus(t, "received") == 2 })
	if p.wait(0) {
		t.Fatal("Run returned while a handler was running within budget")
	}
	close(release)
	p.stop(t)
	if n := b.countStatus(t, "processed"); n != 1 {
		t.Fatalf("processed = %d, want the one running row", n)
	}
	var attempts int
	if err := b.db.Pool.QueryRow(context.Background(),
		`SELECT max(attempts) FROM inbox WHERE status = 'received'`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 {
		t.Fatalf("released rows kept attempts = %d, want 0", attempts)
	}
}
