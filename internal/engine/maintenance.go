package engine

import (
	"time"

	"github.com/inboxd/inboxd/internal/maintenance"
)

// newMaintenance returns p's maintenance services (internal/maintenance),
// on p's database and routes; they wake the claim loop when rows became
// due.
func newMaintenance(p *Pool) *maintenance.Services {
	return maintenance.New(p.db, p, func() { signal(p.wake) }, p.cfg.Config, p.log, p.metrics.maintenance)
}

// SkipsDead reports whether eventType's route is ordered and lets a key go
// on past a dead row (on_dead: skip).
func (p *Pool) SkipsDead(eventType string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	rs, ok := p.routes[eventType]
	return ok && rs.policy.Ordered && !rs.policy.BlocksKey()
}

// RescueDelay is how long a row of eventType rescued after its started
// attempt number attempt waits: its route's backoff after that attempt.
func (p *Pool) RescueDelay(eventType string, attempt int) time.Duration {
	p.mu.Lock()
	policy := p.routeForLocked(eventType).policy
	p.mu.Unlock()
	retry, _ := p.retryPolicy(policy)
	return retry.NextRetry(max(attempt, 1))
}
