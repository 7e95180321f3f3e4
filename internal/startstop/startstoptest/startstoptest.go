// Package startstoptest is the shared test of the start/stop contract
// (package startstop): every service's tests run Contract on it.
package startstoptest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/startstop"
)

// bound is how long a Stop may take, on a loaded machine, in the
// contract's cases: the services under test have nothing in flight.
const bound = 10 * time.Second

// stopped is a service that tells when its goroutines have all returned
// (startstop.Base.Stopped).
type stopped interface {
	Stopped() <-chan struct{}
}

// Contract checks that the services newService returns (a fresh one for
// each case, not started) keep the start/stop contract: Stop before Start
// does nothing; Start returns at once, a second Start (also after Stop)
// fails with startstop.ErrStarted; Stop returns once the service has
// ended, and again at once; Stops from several goroutines all return;
// the end of Start's context ends the service (Stop then returns at
// once); Start and Stop may race.
func Contract(t *testing.T, newService func(t *testing.T) startstop.Service) {
	t.Helper()
	t.Run("stop before start", func(t *testing.T) {
		s := newService(t)
		within(t, "Stop of a service never started", s.Stop)
		within(t, "a second Stop of a service never started", s.Stop)
		if err := s.Start(context.Background()); err != nil {
			t.Fatalf("Start after a Stop before Start = %v, want nil", err)
		}
		within(t, "Stop", s.Stop)
	})
	t.Run("start twice", func(t *testing.T) {
		s := newService(t)
		if err := s.Start(context.Background()); err != nil {
			t.Fatalf("Start = %v", err)
		}
		if err := s.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
			t.Errorf("second Start = %v, want startstop.ErrStarted", err)
		}
		within(t, "Stop", s.Stop)
		if err := s.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
			t.Errorf("Start after Stop = %v, want startstop.ErrStarted (a service runs once)", err)
		}
	})
	t.Run("stop ends the service", func(t *testing.T) {
		s := newService(t)
		if err := s.Start(context.Background()); err != nil {
			t.Fatalf("Start = %v", err)
		}
		within(t, "Stop", s.Stop)
		if st, ok := s.(stopped); ok {
			select {
			case <-st.Stopped():
			default:
				t.Error("Stop returned before the service's goroutines did")
			}
		}
		within(t, "a second Stop", s.Stop)
	})
	t.Run("concurrent stops", func(t *testing.T) {
		s := newService(t)
		if err := s.Start(context.Background()); err != nil {
			t.Fatalf("Start = %v", err)
		}
		within(t, "four Stops at once", func() {
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(s.Stop)
			}
			wg.Wait()
		})
	})
	t.Run("context ends the service", func(t *testing.T) {
		s := newService(t)
		ctx, cancel := context.WithCancel(context.Background())
		if err := s.Start(ctx); err != nil {
			t.Fatalf("Start = %v", err)
		}
		cancel()
		if st, ok := s.(stopped); ok {
			select {
			case <-st.Stopped():
			case <-time.After(bound):
				t.Errorf("the service did not end within %s of its context's end", bound)
			}
		}
		within(t, "Stop after the context ended", s.Stop)
	})
	t.Run("start and stop race", func(t *testing.T) {
		s := newService(t)
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := s.Start(context.Background()); err != nil {
				t.Errorf("Start = %v", err)
			}
		})
		wg.Go(s.Stop)
		wg.Wait()
		within(t, "Stop after the race", s.Stop)
	})
}

// within runs f and fails the test unless it returns within bound.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("%s did not return within %s", what, bound)
	}
}
