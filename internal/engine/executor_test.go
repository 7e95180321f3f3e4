package engine

// Unit tests of the executor and of the books it moves jobs through: they
// need no database (the completer is not started: its results are read
// off its channel).

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/worker"
)

// nextResult returns the next outcome handed to the completer.
func nextResult(t *testing.T, p *Pool) result {
	t.Helper()
	select {
	case r := <-p.completer.results:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome handed to the completer")
		return result{}
	}
}

// Jobs go through the books as their handlers run: a route of concurrency
// 1 runs one and queues the others; every count, the bytes held and the
// gauges follow each transition, and come back to zero.
func TestExecutorRunsDispatchedJobsThroughTheBooks(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	release := make(chan struct{})
	if err := reg.HandleFunc("x", func(ctx context.Context, ev *handlers.Event) error {
		<-release
		return nil
	}, handlers.Concurrency(1)); err != nil {
		t.Fatal(err)
	}
	p := unitPool(t, reg, worker.Config{Workers: 2, Prefetch: 4})
	t.Cleanup(p.executor.quitIdle)
	p.books.track([]*job{newJob(p, 1, "x", 5), newJob(p, 2, "x", 5), newJob(p, 3, "x", 5)})
	p.books.mu.Lock()
	queued, running := p.books.routes.countsLocked()
	rs := p.books.routes.byKey["x"]
	if queued != 2 || running != 1 || len(rs.queue) != 2 || rs.running != 1 || p.books.heldBytes != 6 {
		t.Errorf("queued %d, running %d (route: %d, %d), bytes %d; want 2, 1, 6", queued, running, len(rs.queue), rs.running, p.books.heldBytes)
	}
	p.books.mu.Unlock()
	if g := testutil.ToFloat64(p.metrics.inflight); g != 3 {
		t.Errorf("inflight gauge %v, want 3", g)
	}
	if g := testutil.ToFloat64(p.metrics.routeQueued.WithLabelValues("x")); g != 2 {
		t.Errorf("route queued gauge %v, want 2", g)
	}
	close(release)
	seen := map[int64]bool{}
	for range 3 {
		r := nextResult(t, p)
		if r.outcome != outcomeProcessed || r.status != status.Processed || r.token != 5 {
			t.Errorf("row %d: %s %s, want processed", r.id, r.outcome, r.status)
		}
		seen[r.id] = true
	}
	if len(seen) != 3 {
		t.Errorf("outcomes for rows %v, want 1, 2 and 3", seen)
	}
	if !p.executor.wait(10*time.Second, nil) {
		t.Fatal("handlers did not return")
	}
	p.books.mu.Lock()
	defer p.books.mu.Unlock()
	if queued, running := p.books.routes.countsLocked(); queued != 0 || running != 0 || p.books.heldBytes != 0 || len(p.books.jobs) != 3 {
		t.Errorf("after: queued %d, running %d, bytes %d, jobs %d; want 0, 0, 0 and 3 awaiting their outcome", queued, running, p.books.heldBytes, len(p.books.jobs))
	}
	for _, j := range p.books.jobs {
		if j.state != jobDone {
			t.Errorf("row %d in state %d, want done", j.row.ID, j.state)
		}
	}
}

// A chain's follower waits behind its head and runs once the head's
// handler succeeded; the head's outcome says so (chained).
func TestExecutorRunsAChainInOrder(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	var order []int64
	done := make(chan struct{}, 2)
	if err := reg.HandleFunc("o", func(ctx context.Context, ev *handlers.Event) error {
		order = append(order, ev.ID) // one at a time: the chain runs in order
		done <- struct{}{}
		return nil
	}, handlers.Ordered(handlers.OnDeadBlock)); err != nil {
		t.Fatal(err)
	}
	p := unitPool(t, reg, worker.Config{Workers: 4})
	t.Cleanup(p.executor.quitIdle)
	head, next := newJob(p, 1, "o", 8), newJob(p, 2, "o", 8)
	next.row.Pred = head.row.ID
	p.books.track([]*job{head, next})
	// The follower runs once its head's handler succeeded, not once the
	// head's outcome is written: it may reach the completer first (the
	// order of the handlers is the contract, docs/guarantees.md).
	got := map[int64]result{}
	for range 2 {
		r := nextResult(t, p)
		got[r.id] = r
	}
	<-done
	<-done
	if h, f := got[1], got[2]; h.id != 1 || !h.chained || f.id != 2 || f.chained {
		t.Errorf("outcomes: head %+v, follower %+v; want the head chained, the follower not", h, f)
	}
	if len(order) != 2 || order[0] != 1 || order[1] != 2 {
		t.Errorf("ran %v, want [1 2]", order)
	}
}

// A head that fails gives its follower back unstarted.
func TestExecutorGivesAFailedHeadsChainBack(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	if err := reg.HandleFunc("o", func(ctx context.Context, ev *handlers.Event) error {
		return errors.New("no")
	}, handlers.Ordered(handlers.OnDeadBlock)); err != nil {
		t.Fatal(err)
	}
	p := unitPool(t, reg, worker.Config{Workers: 4, RetryPolicy: fixedRetry{}})
	t.Cleanup(p.executor.quitIdle)
	head, next := newJob(p, 1, "o", 8), newJob(p, 2, "o", 8)
	next.row.Pred = head.row.ID
	p.books.track([]*job{head, next})
	got := map[int64]result{}
	for range 2 {
		r := nextResult(t, p)
		got[r.id] = r
	}
	// chained: the follower waited in this worker, which gives it back
	// itself; the head's completion need not unpark it.
	if r := got[1]; r.outcome != outcomeRetried || !r.chained {
		t.Errorf("head: %s (chained %v), want retried and chained", r.outcome, r.chained)
	}
	if r := got[2]; r.outcome != outcomeReleased || !r.release || r.lastError == nil || !strings.Contains(*r.lastError, "did not finish") {
		t.Errorf("follower: %+v, want released unstarted", r)
	}
	p.executor.wait(10*time.Second, nil)
	p.books.mu.Lock()
	defer p.books.mu.Unlock()
	if queued, running := p.books.routes.countsLocked(); queued != 0 || running != 0 || p.books.heldBytes != 0 || p.books.routes.byKey["o"].waiting != 0 {
		t.Errorf("after: queued %d, running %d, bytes %d, waiting %d; want none", queued, running, p.books.heldBytes, p.books.routes.byKey["o"].waiting)
	}
}

// quitIdle ends the idle goroutines; it may be called twice.
func TestExecutorQuitIdleIsIdempotent(t *testing.T) {
	t.Parallel()
	p := unitPool(t, handlers.NewRegistry(), worker.Config{})
	if !p.executor.wait(time.Second, nil) {
		t.Error("wait with no job running did not return at once")
	}
	p.executor.quitIdle()
	p.executor.quitIdle()
}

// fixedRetry retries after the attempt's number of seconds.
type fixedRetry struct{}

func (fixedRetry) NextRetry(attempt int) time.Duration { return time.Duration(attempt) * time.Second }

func TestOutcome(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	if err := reg.Handle("x", handlers.Ignore(), handlers.MaxAttempts(3), handlers.Timeout(time.Second)); err != nil {
		t.Fatal(err)
	}
	p := unitPool(t, reg, worker.Config{Workers: 2, RetryPolicy: fixedRetry{}, MaxRetryDelay: 10 * time.Second})
	policy := p.books.routes.byKey["x"].policy
	j := &job{row: claimedRow{driver.ClaimedRow{ID: 7, EventID: "e", EventType: "x"}}, token: 9}
	shutdown, stop := context.WithCancelCause(context.Background())
	stop(errShutdown)
	timedOut, cancel := context.WithTimeoutCause(context.Background(), 0, errAttemptTimeout)
	defer cancel()
	<-timedOut.Done()
	fail := errors.New("boom")
	for _, tt := range []struct {
		name    string
		ctx     context.Context
		attempt int
		err     error
		outcome string
		status  status.Status
		delay   time.Duration
		release bool
		errHas  string
	}{
		{"success", context.Background(), 1, nil, outcomeProcessed, status.Processed, 0, false, ""},
		{"retry", context.Background(), 2, fail, outcomeRetried, status.Received, 2 * time.Second, false, "attempt 2 of 3: boom"},
		{"retry after", context.Background(), 1, handlers.RetryAfter(5*time.Second, fail), outcomeRetried, status.Received, 5 * time.Second, false, "boom"},
		{"retry after, capped", context.Background(), 1, handlers.RetryAfter(time.Hour, fail), outcomeRetried, status.Received, 10 * time.Second, false, "boom"},
		{"last attempt", context.Background(), 3, fail, outcomeDead, status.Dead, 0, false, "attempt 3 of 3: boom"},
		{"permanent", context.Background(), 1, handlers.Permanent(fail), outcomeDead, status.Dead, 0, false, "boom"},
		{"not sent", context.Background(), 3, handlers.NotSent(fail), outcomeReleased, status.Received, 3 * time.Second, true, "not counted"},
		{"shutdown", shutdown, 1, fail, outcomeReleased, status.Received, 0, true, "shutdown"},
		{"permanent at shutdown", shutdown, 1, handlers.Permanent(fail), outcomeDead, status.Dead, 0, false, "boom"},
		{"timeout", timedOut, 1, fail, outcomeRetried, status.Received, time.Second, false, "timed out"},
	} {
		ev := j.row.event()
		ev.Attempt = tt.attempt
		r := p.executor.outcome(tt.ctx, j, ev, tt.err, policy)
		if r.outcome != tt.outcome || r.status != tt.status || r.delay != tt.delay || r.release != tt.release || r.id != 7 || r.token != 9 {
			t.Errorf("%s: %s %s in %s (release %v), want %s %s in %s (release %v)",
				tt.name, r.outcome, r.status, r.delay, r.release, tt.outcome, tt.status, tt.delay, tt.release)
		}
		if got := ""; r.lastError != nil {
			got = *r.lastError
			if tt.errHas == "" || !strings.Contains(got, tt.errHas) {
				t.Errorf("%s: last error %q, want it to say %q", tt.name, got, tt.errHas)
			}
		} else if tt.errHas != "" {
			t.Errorf("%s: no last error, want one saying %q", tt.name, tt.errHas)
		}
	}
}

// A route's own backoff is resolved once, with what it leaves out taken
// from the pool's.
func TestRouteBackoffIsResolvedOnce(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	if err := reg.Handle("own", handlers.Ignore(), handlers.Backoff(time.Minute, 0)); err != nil {
		t.Fatal(err)
	}
	def := worker.ExponentialBackoff{Base: time.Second, Max: 30 * time.Second}
	p := unitPool(t, reg, worker.Config{RetryPolicy: def, MaxRetryDelay: 20 * time.Second})
	if got := p.books.routes.byKey[""].policy; !sameBackoff(got.retry, def) || got.maxDelay != 20*time.Second {
		t.Errorf("default route: %+v, %s; want the pool's", got.retry, got.maxDelay)
	}
	if got := p.books.routes.byKey["own"].policy; !sameBackoff(got.retry, worker.ExponentialBackoff{Base: time.Minute, Max: time.Minute}) || got.maxDelay != time.Minute {
		t.Errorf("own backoff: %+v, %s; want base 1m, max max(30s, 1m)", got.retry, got.maxDelay)
	}
}

// sameBackoff reports whether r is an worker.ExponentialBackoff with want's base
// and max.
func sameBackoff(r worker.RetryPolicy, want worker.ExponentialBackoff) bool {
	eb, ok := r.(worker.ExponentialBackoff)
	return ok && eb.Base == want.Base && eb.Max == want.Max
}
