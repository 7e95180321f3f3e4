package engine

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/clock"
	"github.com/inboxd/inboxd/internal/lease"
	"github.com/inboxd/inboxd/worker"
)

// settings is the pool's configuration as it runs: worker.Config with its
// defaults, its Prefetch resolved, and the intervals derived from its
// lease (internal/lease).
type settings struct {
	worker.Config
	adaptivePrefetch bool // Prefetch was left to the pool (0)
	noHistory        bool // WithoutHistory: no attempt is written to the rows' histories
}

// Option is a setting of a Pool beyond worker.Config, given to New.
type Option func(*settings)

// WithoutHistory makes a Pool write no attempt to the rows' histories
// (migration 017): neither its completions nor its claims (a lapsed
// reservation's attempt) nor its transactional handlers. The rescuer
// still writes the attempts it ends. It exists only to measure what the
// history costs (inboxd-bench -run history, BenchmarkHistoryOfFirstAttempts).
func WithoutHistory() Option {
	return func(s *settings) { s.noHistory = true }
}

// newSettings resolves c (with its defaults) and checks it against the
// bounds of worker.Config.
func newSettings(c worker.Config) (settings, error) {
	if err := c.Validate(); err != nil {
		return settings{}, err
	}
	s := settings{Config: c.WithDefaults()}
	switch {
	case s.Prefetch == 0:
		s.Prefetch = min(s.ClaimBatch, 4*s.Workers)
		s.adaptivePrefetch = true
	case s.Prefetch < 0:
		s.Prefetch = 0
	}
	return s, nil
}

// renewTick is how often the renewal loop looks for leases to extend.
func (s settings) renewTick() time.Duration { return lease.RenewTick(s.Lease) }

// renewThreshold is how much of its lease a row may have left before it is
// renewed.
func (s settings) renewThreshold() time.Duration { return lease.RenewThreshold(s.Lease) }

// startMargin is how much of its lease a row must have left to start (and
// its start mark to be written).
func (s settings) startMargin() time.Duration { return lease.StartMargin(s.Lease) }

// maxCapacity is the most rows a route of the default concurrency holds
// at once, running and waiting (its prefetch at its largest).
func (s settings) maxCapacity() int {
	if s.adaptivePrefetch {
		return s.Workers + max(s.Prefetch, 2*s.ClaimBatch)
	}
	return s.Workers + s.Prefetch
}

// archetype is what every component of a pool is built from (after
// River's baseservice.Archetype): the pool's settings, its logger, its
// metrics, and its clock, which tells every component the same time (a
// test stubs it once for all: Pool.clock).
type archetype struct {
	cfg     settings
	log     zerolog.Logger
	metrics *metrics
	clock   *clock.Clock
}

// cancelGrace is how long cancelled handlers get to return at shutdown
// before their rows are released anyway; the rest of worker.ShutdownMargin
// is for writing outcomes.
const cancelGrace = 2 * time.Second
