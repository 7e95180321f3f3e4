package startstop_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/startstop/startstoptest"
	"github.com/inboxd/inboxd/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ticker is the smallest service on the base: one goroutine that ends with
// its context.
type ticker struct {
	startstop.Base
	ticks atomic.Int64
}

func (s *ticker) Start(ctx context.Context) error {
	return s.StartWith(ctx, func(ctx context.Context) error {
		s.Go(func() {
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					s.ticks.Add(1)
				}
			}
		})
		return nil
	})
}

// The base keeps the contract.
func TestBaseKeepsTheContract(t *testing.T) {
	t.Parallel()
	startstoptest.Contract(t, func(*testing.T) startstop.Service { return &ticker{} })
}

// A Start whose launch fails returns its error and counts as run: Stop
// returns at once, a second Start fails.
func TestFailedStart(t *testing.T) {
	t.Parallel()
	var b startstop.Base
	boom := errors.New("boom")
	if err := b.StartWith(context.Background(), func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("StartWith = %v, want boom", err)
	}
	b.Stop()
	<-b.Stopped()
	if err := b.StartWith(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, startstop.ErrStarted) {
		t.Errorf("StartWith after a failed start = %v, want ErrStarted", err)
	}
}

// StartAll starts in order and, when one fails, stops those it started;
// Run starts, waits for its context and stops.
func TestStartAllAndRun(t *testing.T) {
	t.Parallel()
	a, b := &ticker{}, &ticker{}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := startstop.StartAll(context.Background(), a, b); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("StartAll with a service started before = %v, want ErrStarted", err)
	}
	select {
	case <-a.Stopped():
	case <-time.After(10 * time.Second):
		t.Fatal("StartAll did not stop the service it started before the failure")
	}
	b.Stop()

	ctx, cancel := context.WithCancel(context.Background())
	c := &ticker{}
	done := make(chan error, 1)
	go func() { done <- startstop.Run(ctx, c) }()
	testkit.WaitFor(t, 10*time.Second, "a tick of the running service", func() bool { return c.ticks.Load() > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	<-c.Stopped()
}
