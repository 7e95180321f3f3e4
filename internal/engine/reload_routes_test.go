package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// Reproduction from the reliability issue: a route removed by a reload
// (SIGHUP) while it held rows kept its old policy (here ordered,
// concurrency 1) until the next reload, since a route's state was pruned
// only by a reload and only once it held nothing: its queued rows waited
// for its one handler, and later claims of its type still went to it. Its
// rows now fall to the default route at once (queued ones moved there,
// later ones claimed there); the running one finishes under the policy it
// started with, and the old route's state is gone once it ends.
func TestRemovedRouteFallsToTheDefaultRoute(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	running, most := 0, 0
	release := make(chan struct{})
	handle := func(ctx context.Context, ev *handlers.Event) error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	if err := b.reg.HandleFunc("gone", handle, handlers.Concurrency(1), handlers.Ordered(handlers.OnDeadBlock)); err != nil {
		t.Fatal(err)
	}
	b.reg.SetDefault(handlers.HandlerFunc(handle))
	cfg := testConfig() // 4 workers: the default route runs 4 at once
	p := b.start(t, cfg)
	b.insert(t, "gone", ids("g", 6)...)
	most1 := func() int { mu.Lock(); defer mu.Unlock(); return most }
	waitFor(t, 10*time.Second, "the route's one handler running", func() bool { return most1() == 1 })
	waitFor(t, 10*time.Second, "the route holding rows beyond the running one", func() bool {
		p.books.mu.Lock()
		defer p.books.mu.Unlock()
		rs := p.books.routes.byKey["gone"]
		return rs != nil && rs.held() > 1
	})

	reg := handlers.NewRegistry()
	reg.SetDefault(handlers.HandlerFunc(handle))
	p.SetRegistry(reg)
	waitFor(t, 10*time.Second, "the removed route's rows running under the default route's concurrency (4)", func() bool {
		return most1() == cfg.Workers
	})
	close(release)
	waitFor(t, 10*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == 6 })
	if m := most1(); m > cfg.Workers {
		t.Errorf("%d handlers ran at once, beyond the default route's concurrency %d", m, cfg.Workers)
	}
	waitFor(t, 5*time.Second, "the removed route's state pruned", func() bool {
		p.books.mu.Lock()
		defer p.books.mu.Unlock()
		_, ok := p.books.routes.byKey["gone"]
		return !ok
	})
}
