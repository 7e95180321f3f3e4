package worker

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The maintenance services keep the inbox in shape beside the hot path:
// the rescuer (rescuer.go) returns the rows of expired leases, the sweeper
// (sweeper.go) unparks ordered rows that wait for nothing and deletes the
// start bits of claims no worker holds, the stats refresher (stats.go)
// keeps the live-row gauges, and retention (retention.go) deletes expired
// rows. Each is a service (service.go) built on periodic, and depends on
// the few things it needs of the pool's routes (rescueRoutes,
// orderedRoutes), not on the Pool, so that each can be run and tested
// alone.

// rescueRoutes is what the rescuer needs to know of the pool's routes.
type rescueRoutes interface {
	// maxAttemptsByType returns the routes whose max attempts differ from
	// the pool's, and theirs.
	maxAttemptsByType() (types []string, max []int32)
	// rescueDelay is how long a row of eventType rescued after its
	// started attempt number attempt waits.
	rescueDelay(eventType string, attempt int) time.Duration
	// skipsDead reports whether eventType's route is ordered and lets a
	// key go on past a dead row.
	skipsDead(eventType string) bool
}

// orderedRoutes is what the sweeper and the stats refresher need to know
// of the pool's routes: the event types of the ordered routes, and of
// those whose dead rows block their key.
type orderedRoutes interface {
	orderedTypes() (ordered, blocking []string)
}

// The maintenance services keep the service contract.
var (
	_ service = (*rescuer)(nil)
	_ service = (*sweeper)(nil)
	_ service = (*statsRefresher)(nil)
	_ service = (*Retention)(nil)
	_ service = (*maintenance)(nil)
	_ service = (*controlsReader)(nil)
)

// errStarted is Start's error on a service that was started before.
var errStarted = errors.New("worker: service already started")

// periodic is the start/stop contract (service) of a service that runs a
// round at Start and then every interval, until Stop or the end of Start's
// context. Rounds report their own errors: the next round tries again.
type periodic struct {
	interval time.Duration
	round    func(ctx context.Context)

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the loop returned; nil before Start
}

// Start launches the loop; it fails only if the service was started
// before.
func (s *periodic) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errStarted
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			s.round(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// Stop ends the loop and returns once it has: after the round in progress,
// whose statements see their context cancelled. It is a no-op on a service
// never started.
func (s *periodic) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// maintenance is the pool's maintenance services, started and stopped
// together (retention runs beside the pool, on its own).
type maintenance struct {
	rescuer *rescuer
	sweeper *sweeper
	stats   *statsRefresher
}

// newMaintenance returns p's maintenance services, on p's database and
// routes; the rescuer unparks through the sweeper, and both wake the claim
// loop when rows became due.
func newMaintenance(p *Pool) *maintenance {
	wake := func() { signal(p.wake) }
	sw := newSweeper(p.db, p, wake, p.cfg, p.log, p.metrics)
	return &maintenance{
		rescuer: newRescuer(p.db, p, sw, wake, p.cfg, p.log, p.metrics),
		sweeper: sw,
		stats:   newStatsRefresher(p.db, p, p.cfg, p.log, p.metrics),
	}
}

// services lists m's services, in their start order.
func (m *maintenance) services() []service {
	return []service{m.rescuer, m.sweeper, m.stats}
}

// Start starts every service; on an error it stops those it started.
func (m *maintenance) Start(ctx context.Context) error {
	services := m.services()
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			for _, started := range services[:i] {
				started.Stop()
			}
			return err
		}
	}
	return nil
}

// Stop stops every service and returns once they all have.
func (m *maintenance) Stop() {
	for _, s := range m.services() {
		s.Stop()
	}
}

// skipsDead reports whether eventType's route is ordered and lets a key go
// on past a dead row (on_dead: skip).
func (p *Pool) skipsDead(eventType string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	rs, ok := p.routes[eventType]
	return ok && rs.policy.Ordered && !rs.policy.BlocksKey()
}

// rescueDelay is how long a row of eventType rescued after its started
// attempt number attempt waits: its route's backoff after that attempt.
func (p *Pool) rescueDelay(eventType string, attempt int) time.Duration {
	p.mu.Lock()
	policy := p.routeForLocked(eventType).policy
	p.mu.Unlock()
	retry, _ := p.retryPolicy(policy)
	return retry.NextRetry(max(attempt, 1))
}
