package engine

// Unit tests of the leaser's start/stop contract and of the start bits:
// they need no database.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/worker"
)

// A claim's start bits: bit pos-1 per row, the version bumped at every
// change and only then.
func TestClaimStartsBits(t *testing.T) {
	t.Parallel()
	var c claimStarts
	for _, tt := range []struct {
		pos     int64
		on      bool
		changed bool
		bits    []byte
	}{
		{1, true, true, []byte{1}},
		{1, true, false, []byte{1}},
		{10, true, true, []byte{1, 2}},
		{1, false, true, []byte{0, 2}},
		{17, false, false, []byte{0, 2}}, // clearing beyond the bits grows nothing
		{0, true, false, []byte{0, 2}},   // positions start at 1
	} {
		before := c.version
		if got := c.set(tt.pos, tt.on); got != tt.changed || !slices.Equal(c.bits, tt.bits) {
			t.Errorf("set(%d, %v) = %v, bits %v; want %v, %v", tt.pos, tt.on, got, c.bits, tt.changed, tt.bits)
		}
		if bumped := c.version != before; bumped != tt.changed {
			t.Errorf("set(%d, %v): version bumped %v, want %v", tt.pos, tt.on, bumped, tt.changed)
		}
	}
}

// Stop on a leaser never started is a no-op; once its mark writers have
// ended, a start that needs a mark is answered at risk: the handler does
// not run and the row is given back unstarted.
func TestLeaserAnswersMarksAtRiskOnceStopped(t *testing.T) {
	t.Parallel()
	p := unitPool(t, handlers.NewRegistry(), worker.Config{})
	p.leaser.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.leaser.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p.leaser.Stop()
	p.leaser.Stop()

	j := newJob(p, 1, "x", 4)
	j.dbStarted = false
	p.books.track([]*job{j}) // dispatched: its executor waits for its mark
	if !p.executor.wait(10*time.Second, nil) {
		t.Fatal("the executor did not return")
	}
	p.executor.quitIdle()
	r := nextResult(t, p)
	if r.id != 1 || r.outcome != outcomeReleased || !r.release {
		t.Errorf("outcome %+v, want row 1 released unstarted", r)
	}
	if n := testutil.ToFloat64(p.metrics.leaseAtRisk); n != 1 {
		t.Errorf("%v rows counted at risk, want 1", n)
	}
}
