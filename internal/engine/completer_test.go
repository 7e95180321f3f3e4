package engine

// Unit tests of the completer's start/stop contract: they need no
// database (the pool's never connects).

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/worker"
)

// onBooks puts j on p's books as a finished job whose outcome waits.
func onBooks(p *Pool, j *job) {
	p.books.mu.Lock()
	defer p.books.mu.Unlock()
	j.route = p.books.routes.byKey[""]
	j.state = jobDone
	p.books.jobs[j.row.ID] = j
	p.books.claims[j.token] = &claimStarts{held: 1}
}

func onBooksCount(p *Pool) (jobs, claims int) {
	p.books.mu.Lock()
	defer p.books.mu.Unlock()
	return len(p.books.jobs), len(p.books.claims)
}

// Stop on a completer never started returns at once, twice; an outcome
// submitted after Stop is dropped and its job leaves the books (its row
// returns when its lease expires).
func TestCompleterSubmitAfterStopForgets(t *testing.T) {
	t.Parallel()
	p := unitPool(t, handlers.NewRegistry(), worker.Config{})
	p.completer.Stop()
	p.completer.Stop()
	j := newJob(p, 1, "x", 3)
	onBooks(p, j)
	p.completer.submit(p.rel.result(j, "test"))
	if jobs, claims := onBooksCount(p); jobs != 0 || claims != 0 {
		t.Errorf("%d jobs, %d claims on the books after a dropped outcome, want none", jobs, claims)
	}
}

// Once the hard deadline has passed, a batch that cannot be written is
// given up on at once: Stop returns, the jobs leave the books, and the
// failure is counted.
func TestCompleterGivesUpAtTheHardDeadline(t *testing.T) {
	t.Parallel()
	p := unitPool(t, handlers.NewRegistry(), worker.Config{})
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.completer.Start(stop); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 3; id++ {
		j := newJob(p, id, "x", id)
		onBooks(p, j)
		p.completer.submit(p.rel.result(j, "test"))
	}
	p.completer.Stop()
	if jobs, claims := onBooksCount(p); jobs != 0 || claims != 0 {
		t.Errorf("%d jobs, %d claims on the books after the completer gave up, want none", jobs, claims)
	}
	if n := testutil.ToFloat64(p.metrics.dbErrors.WithLabelValues("complete")); n < 1 {
		t.Errorf("%v failed completions counted, want at least 1", n)
	}
}
