// Package maintenance holds the services that keep the inbox in shape
// beside the engine's hot path, on every replica: the rescuer
// (rescuer.go) returns the rows of expired leases, the sweeper (sweeper.go)
// unparks ordered rows that wait for nothing and deletes the start bits of
// claims no worker holds, the stats refresher (stats.go) keeps the
// live-row gauges, the controls reader (controls.go) reads the route
// controls (pauses, rate overrides, breaker resets), and retention (retention.go) deletes expired rows. Each is a
// service (internal/startstop) built on periodic, and depends on the few things it needs of the
// pool's routes (RescueRoutes, OrderedRoutes, RouteControls), never on the
// pool, so that each can be run and tested alone. The engine
// (internal/engine) wires them; the CLI runs retention alone (inboxd
// prune).
package maintenance

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/startstop"
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

// The maintenance services keep the start/stop contract
// (internal/startstop).
var (
	_ startstop.Service = (*Rescuer)(nil)
	_ startstop.Service = (*Sweeper)(nil)
	_ startstop.Service = (*statsRefresher)(nil)
	_ startstop.Service = (*Retention)(nil)
	_ startstop.Service = (*Services)(nil)
	_ startstop.Service = (*ControlsReader)(nil)
	_ startstop.Service = (*Rollup)(nil)
)

// periodic is the base of a service that runs a round at Start and then
// every interval, until Stop or the end of Start's context (the
// start/stop contract, startstop.Base). Rounds report their own errors:
// the next round tries again.
type periodic struct {
	startstop.Base
	interval time.Duration
	round    func(ctx context.Context)
}

// Start launches the loop; it fails only if the service was started
// before (startstop.ErrStarted).
func (s *periodic) Start(ctx context.Context) error {
	return s.StartWith(ctx, func(ctx context.Context) error {
		s.Go(func() {
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
		})
		return nil
	})
}

// Services are the pool's maintenance services, started and stopped
// together (retention runs beside the pool, on its own).
type Services struct {
	Rescuer *Rescuer
	Sweeper *Sweeper
	stats   *statsRefresher
	rollup  *Rollup
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
		rollup:  NewRollup(db, m.Tally, RollupInterval, log, m),
	}
}

// services lists m's services, in their start order.
func (m *Services) services() []startstop.Service {
	return []startstop.Service{m.Rescuer, m.Sweeper, m.stats, m.rollup}
}

// Start starts every service; on an error it stops those it started.
func (m *Services) Start(ctx context.Context) error { return startstop.StartAll(ctx, m.services()...) }

// Stop stops every service and returns once they all have.
func (m *Services) Stop() { startstop.StopAll(m.services()...) }

// nonNil returns s, or an empty slice for nil (a NULL array would make
// `= ANY` unknown).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
