// Package startstop is the one start/stop contract of inboxd's services
// (after River's rivershared/startstop), and the base that keeps it:
//
//   - Start launches the service's goroutines and returns at once; it
//     fails only before it launched anything. A service runs once: a
//     second Start, also after Stop, returns ErrStarted.
//   - Stop asks the goroutines to end (it cancels the context they run
//     under) and returns once every one has. Before Start, and after the
//     first, it does nothing but wait for that end; calls from several
//     goroutines all wait.
//   - The end of Start's context ends the service as Stop does.
//
// A service embeds Base and writes its Start with StartWith; Base gives it
// Stop and Stopped. The shared test of the contract is
// startstoptest.Contract, which every service's tests run.
package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted is Start's error on a service started before: a service runs
// once.
var ErrStarted = errors.New("service already started: a service runs once")

// Service is a service with the start/stop contract of the package.
type Service interface {
	// Start launches the service and returns at once.
	Start(ctx context.Context) error
	// Stop ends the service and returns once it has ended.
	Stop()
}

// Base keeps the start/stop contract for the service that embeds it: the
// service's Start calls StartWith, which launches its goroutines (Go)
// under a context that Stop cancels; Stop waits for them. The zero Base
// is ready.
type Base struct {
	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	running sync.WaitGroup
	stopped chan struct{} // closed once started and every goroutine returned
}

// StartWith starts the service: it calls launch with the context the
// service's goroutines run under (ended by Stop, or with ctx), which
// launches them with Go and returns at once. It returns ErrStarted if the
// service was started before, launch's error if launch fails (it must then
// have launched nothing; the service counts as started, and stopped).
func (b *Base) StartWith(ctx context.Context, launch func(ctx context.Context) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return ErrStarted
	}
	b.started = true
	ctx, b.cancel = context.WithCancel(ctx)
	stopped := b.stoppedLocked()
	b.running.Add(1) // launch's own, so that a goroutine that returns at once does not end the service
	err := launch(ctx)
	b.running.Done()
	go func() { b.running.Wait(); close(stopped) }()
	if err != nil {
		b.cancel()
	}
	return err
}

// Go runs f on a goroutine of the service, which Stop waits for. Only
// launch (StartWith) calls it, or a goroutine of the service.
func (b *Base) Go(f func()) {
	b.running.Add(1)
	go func() {
		defer b.running.Done()
		f()
	}()
}

// Stop cancels the service's context and returns once every goroutine of
// the service has returned. Before Start it does nothing.
func (b *Base) Stop() {
	b.mu.Lock()
	if !b.started {
		b.mu.Unlock()
		return
	}
	b.cancel()
	stopped := b.stopped
	b.mu.Unlock()
	<-stopped
}

// Stopped is closed once the service was started and every goroutine it
// launched has returned: after Stop, or when they ended by themselves
// (Start's context ended).
func (b *Base) Stopped() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stoppedLocked()
}

func (b *Base) stoppedLocked() chan struct{} {
	if b.stopped == nil {
		b.stopped = make(chan struct{})
	}
	return b.stopped
}

// Run runs s until ctx ends: Start, then Stop once ctx is done. It
// returns Start's error, or nil after the stop.
func Run(ctx context.Context, s Service) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	s.Stop()
	return nil
}

// StartAll starts services in order; if one fails, it stops those it
// started and returns the error.
func StartAll(ctx context.Context, services ...Service) error {
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			StopAll(services[:i]...)
			return err
		}
	}
	return nil
}

// StopAll stops services in order, each once the one before it stopped.
func StopAll(services ...Service) {
	for _, s := range services {
		s.Stop()
	}
}
