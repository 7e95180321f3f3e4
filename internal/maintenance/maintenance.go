// Package maintenance holds the services that keep the inbox in shape
// beside the engine's hot path, on every replica: the rescuer
// (rescuer.go) returns the rows of expired leases, the sweeper (sweeper.go)
// unparks ordered rows that wait for nothing and deletes the start bits of
// claims no worker holds, the stats refresher (stats.go) keeps the
// live-row gauges, the controls reader (controls.go) reads the paused
// routes, and retention (retention.go) deletes expired rows. Each is a
// service built on periodic, and depends on the few things it needs of the
// pool's routes (RescueRoutes, OrderedRoutes, PausedRoutes), never on the
// pool, so that each can be run and tested alone. The engine
// (internal/engine) wires them; the CLI runs retention alone (inboxd
// prune).
package maintenance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/worker"
)

// RescueRoutes is what the rescuer needs to know of the pool's routes.
type RescueRoutes interface {
	// MaxAttemptsByType returns the routes whose max attempts differ from
	// the pool's, and theirs.
	MaxAttemptsByType() (types []string, max []int32)
	// RescueDelay is how long a row of eventType rescued after its
	// started attempt number attempt waits.
	RescueDelay(eventType string, attempt int) time.Duration
	// SkipsDead reports whether eventType's route is ordered and lets a
	// key go on past a dead row.
	SkipsDead(eventType string) bool
}

// OrderedRoutes is what the sweeper and the stats refresher need to know
// of the pool's routes: the event types of the ordered routes, and of
// those whose dead rows block their key.
type OrderedRoutes interface {
	OrderedTypes() (ordered, blocking []string)
}

// service is the start/stop contract every service here keeps.
type service interface {
	Start(ctx context.Context) error
	Stop()
}

// The maintenance services keep the service contract.
var (
	_ service = (*Rescuer)(nil)
	_ service = (*Sweeper)(nil)
	_ service = (*statsRefresher)(nil)
	_ service = (*Retention)(nil)
	_ service = (*Services)(nil)
	_ service = (*ControlsReader)(nil)
)

// errStarted is Start's error on a service that was started before.
var errStarted = errors.New("maintenance: service already started")

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

// Services are the pool's maintenance services, started and stopped
// together (retention runs beside the pool, on its own).
type Services struct {
	Rescuer *Rescuer
	Sweeper *Sweeper
	stats   *statsRefresher
}

// Routes is what the pool's maintenance services need to know of its
// routes.
type Routes interface {
	RescueRoutes
	OrderedRoutes
}

// New returns the maintenance services of a pool on db with routes, after
// cfg (with its defaults); the rescuer unparks through the sweeper, and
// both call wake when rows became due.
func New(db *pgxpool.Pool, routes Routes, wake func(), cfg worker.Config, log zerolog.Logger, m *Metrics) *Services {
	sw := newSweeper(db, routes, wake, cfg, log, m)
	return &Services{
		Rescuer: newRescuer(db, routes, sw, wake, cfg, log, m),
		Sweeper: sw,
		stats:   newStatsRefresher(db, routes, cfg, log, m),
	}
}

// services lists m's services, in their start order.
func (m *Services) services() []service {
	return []service{m.Rescuer, m.Sweeper, m.stats}
}

// Start starts every service; on an error it stops those it started.
func (m *Services) Start(ctx context.Context) error {
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
func (m *Services) Stop() {
	for _, s := range m.services() {
		s.Stop()
	}
}

// nonNil returns s, or an empty slice for nil (a NULL array would make
// `= ANY` unknown).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
