package engine

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
)

// The reproduction from the issue: 16 workers, 2 transactional
// connections, a 1 s route timeout, handlers of 600 ms and 2 attempts.
// Rows waiting for a transactional connection used to wait under the
// attempt's timeout: 8 went dead with "begin transaction: context deadline
// exceeded" without their handler ever running. The timeout applies to the
// handler, not to the wait for a connection, and the wait costs no
// attempt: every row is processed on its first attempt, its handler run
// once.
func TestTxConnectionWaitCostsNoAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls callCounter
	if err := b.reg.HandleTx("tx.wait", handlers.TxHandlerFunc(func(ctx context.Context, _ pgx.Tx, ev *handlers.Event) error {
		calls.add(ev.EventID)
		return handlerSleep(ctx, 600*time.Millisecond)
	}), handlers.Timeout(time.Second), handlers.MaxAttempts(2)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Workers, cfg.TxConns = 16, 2
	b.start(t, cfg)
	all := ids("tx", 16)
	b.insert(t, "tx.wait", all...)
	waitFor(t, 30*time.Second, "every row finished", func() bool {
		return b.countStatus(t, "processed")+b.countStatus(t, "dead") == len(all)
	})
	for _, id := range all {
		r := b.row(t, id)
		if r.Status != "processed" || r.Attempts != 1 || calls.get(id) != 1 {
			t.Errorf("%s: %s after %d attempts, handler run %d times (last_error %q); want processed on attempt 1, run once",
				id, r.Status, r.Attempts, calls.get(id), errString(r.LastError))
		}
	}
}

// A Go handler that ignores cancellation no longer keeps its row for
// ever: once its route's timeout and stuckGrace have passed, its lease is
// no longer renewed (counted, and logged with the row), so the lease lapses
// and the rescuer returns the row, which the next attempt processes; when
// the stuck handler returns at last, its outcome is fenced.
func TestStuckHandlerLosesItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unstick := make(chan struct{})
	var unstickOnce sync.Once
	free := func() { unstickOnce.Do(func() { close(unstick) }) }
	t.Cleanup(free) // after the pool stopped, should the test fail early
	var stuckReturned atomic.Bool
	if err := b.reg.HandleFunc("stuck", func(ctx context.Context, ev *handlers.Event) error {
		if ev.Attempt == 1 {
			<-unstick // ignores ctx
			stuckReturned.Store(true)
			return nil
		}
		return nil
	}, handlers.Timeout(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Lease = time.Second
	cfg.RescueInterval = 100 * time.Millisecond
	p := b.start(t, cfg)
	b.insert(t, "stuck", "s-1")
	waitFor(t, 3*stuckGrace+10*time.Second, "the stuck handler's row rescued and processed", func() bool {
		return b.row(t, "s-1").Status == "processed"
	})
	free()
	r := b.row(t, "s-1")
	if r.Attempts != 2 || !strings.Contains(errString(r.LastError), "lease expired during attempt 1") {
		t.Errorf("row = %s after %d attempts (%q), want processed on attempt 2 after the stuck one's lease expired",
			r.Status, r.Attempts, errString(r.LastError))
	}
	if n := testutil.ToFloat64(p.metrics.stuckHandlers); n != 1 {
		t.Errorf("stuck handlers counted: %v, want 1", n)
	}
	waitFor(t, 10*time.Second, "the stuck handler's late outcome fenced", func() bool {
		return stuckReturned.Load() && testutil.ToFloat64(p.metrics.fenced) >= 1
	})
	if r2 := b.row(t, "s-1"); r2.Status != "processed" || r2.Attempts != 2 || r2.ProcessedAt == nil || !r2.ProcessedAt.Equal(*r.ProcessedAt) {
		t.Errorf("row changed by the stuck handler's late outcome: %+v, was %+v", r2, r)
	}
}
