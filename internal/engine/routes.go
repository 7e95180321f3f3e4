package engine

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/worker"
)

// routeTable is the pool's routes, in its books and under their lock
// (mu, the books'): each route's state by its key, the route controls as
// last read, and what the route controls keep (controls.go). The methods
// named ...Locked need the lock held; the others take it, and answer the
// maintenance services' questions (internal/maintenance: OrderedRoutes,
// RescueRoutes, RouteControls).
type routeTable struct {
	mu    *sync.Mutex            // the books' lock
	byKey map[string]*routeState // by route ("" for the default route)
	// controls is the route controls as last read (controls.go), by
	// their driver names, for the routes a reload adds and the rates a
	// reload resolves again.
	controls map[string]driver.RouteControl
	// breakers is set while some route has a circuit breaker (set by
	// syncLocked): attemptEnded takes the lock only then.
	breakers atomic.Bool

	archetype        // cfg: the pool's defaults for the routes' policies
	wake      func() // rows may be due: the claim loop looks (set by the pool)
}

// newRouteTable returns an empty route table under mu, for a pool built
// from a; wake is set by the pool.
func newRouteTable(mu *sync.Mutex, a archetype) *routeTable {
	return &routeTable{mu: mu, byKey: make(map[string]*routeState), archetype: a, wake: func() {}}
}

// countsLocked returns the jobs waiting for a handler (queued, or behind
// the row before them in a key's chain) and the jobs whose handler runs,
// all routes.
func (rt *routeTable) countsLocked() (queued, running int) {
	for _, rs := range rt.byKey {
		queued += len(rs.queue) + rs.waiting
		running += rs.running
	}
	return queued, running
}

// BlockingTypes returns the event types of the routes whose dead rows hold
// their key back (ordered, on_dead: block), as the routes are now.
func (rt *routeTable) BlockingTypes() []string {
	_, blocking := rt.OrderedTypes()
	return blocking
}

// forLocked returns the route state for eventType: its own route's if the
// registry routes it, else the default route's.
func (rt *routeTable) forLocked(eventType string) *routeState {
	if rs, ok := rt.byKey[eventType]; ok {
		return rs
	}
	return rt.byKey[""]
}

// syncLocked makes the route states follow the registry: new routes get a
// state, changed ones their new policy; routes that are gone are retired
// (retireLocked) and their jobs (of jobs) fall to the default route at
// once. The caller dispatches the routes afterwards.
func (rt *routeTable) syncLocked(reg *handlers.Registry, jobs map[int64]*job) {
	want := append(reg.Routes(), reg.Default())
	seen := make(map[string]bool, len(want))
	for _, r := range want {
		seen[r.Type] = true
		rs := rt.byKey[r.Type]
		if rs == nil {
			rs = &routeState{key: r.Type}
			c := rt.controls[rs.controlName()]
			rs.paused, rs.resetSeen = c.Paused, c.BreakerResetAt
			rt.byKey[r.Type] = rs
		}
		rs.policy = rt.resolvePolicy(r.Policy)
		rs.fileRate, rs.fileBurst = rs.policy.Rate, rs.policy.Burst
		rt.rateLocked(rs, rt.controls[rs.controlName()])
		if rs.policy.Breaker.Failures == 0 {
			rs.breaker, rs.failures = breakerClosed, 0 // a breaker taken out of the file
		}
		rs.limit = rs.policy.Concurrency
		rs.basePrefetch = rt.prefetchFor(rs.limit)
		if !rt.cfg.adaptivePrefetch || rs.prefetch < rs.basePrefetch {
			rs.prefetch = rs.basePrefetch // an adapted prefetch survives a reload
		}
		rt.gaugesLocked(rs)
	}
	breakers := false
	for k, rs := range rt.byKey {
		if !seen[k] {
			rt.retireLocked(rs, jobs)
		} else if rs.policy.Breaker.Failures > 0 {
			breakers = true
		}
	}
	rt.breakers.Store(breakers)
}

// retireLocked takes rs, a route the registry no longer has, off the
// books: claims no longer give it rows (they go to the default route, and
// its type is no longer ordered), and the rows it holds move to the default
// route: those not started (queued, or waiting in a key's chain) run with
// its policy, and those running count against its concurrency until they
// return (each attempt keeps the policy it started with). Nothing refers to
// rs after that; its gauges go at once. The caller dispatches the default
// route.
func (rt *routeTable) retireLocked(rs *routeState, jobs map[int64]*job) {
	def := rt.byKey[""]
	delete(rt.byKey, rs.key)
	def.queue = append(def.queue, rs.queue...)
	for _, j := range jobs {
		if j.route == rs {
			j.route = def
		}
	}
	def.running += rs.running
	def.waiting += rs.waiting
	rs.queue, rs.running, rs.waiting = nil, 0, 0
	if rs.gauges != nil {
		rt.metrics.routeLimit.DeleteLabelValues(rs.key)
		rt.metrics.routeRunning.DeleteLabelValues(rs.key)
		rt.metrics.routeQueued.DeleteLabelValues(rs.key)
		rt.metrics.routePaused.DeleteLabelValues(rs.key)
		rt.metrics.routeBreaker.DeleteLabelValues(rs.key)
		rs.gauges = nil
	}
	rt.gaugesLocked(def)
}

// resolvePolicy fills a route's policy in with the pool's defaults, and
// resolves its backoff: the pool's, unless the route sets its own (then
// what it leaves out comes from the pool's, if that is an
// worker.ExponentialBackoff).
func (rt *routeTable) resolvePolicy(pol handlers.Policy) routePolicy {
	switch {
	case pol.Concurrency > 0:
	case pol.Batch.MaxRows > 0:
		// Two batches at once: one runs while the next gathers.
		pol.Concurrency = min(handlers.MaxConcurrency, 2*pol.Batch.MaxRows)
	default:
		pol.Concurrency = rt.cfg.Workers
	}
	if pol.MaxAttempts == 0 {
		pol.MaxAttempts = rt.cfg.MaxAttempts
	}
	if pol.Ordered && pol.OnDead == "" {
		pol.OnDead = handlers.OnDeadBlock
	}
	if pol.Rate > 0 && pol.Burst == 0 {
		pol.Burst = oneSecondBurst(pol.Rate)
	}
	if pol.BackoffBase <= 0 && pol.BackoffMax <= 0 {
		return routePolicy{Policy: pol, retry: rt.cfg.RetryPolicy, maxDelay: rt.cfg.MaxRetryDelay}
	}
	eb := worker.ExponentialBackoff{Base: pol.BackoffBase, Max: pol.BackoffMax}
	if def, ok := rt.cfg.RetryPolicy.(worker.ExponentialBackoff); ok {
		eb.Rand = def.Rand
		if eb.Base == 0 {
			eb.Base = def.Base
		}
		if eb.Max == 0 {
			eb.Max = max(def.Max, eb.Base)
		}
	}
	return routePolicy{Policy: pol, retry: eb, maxDelay: eb.Max}
}

// prefetchFor is a route's prefetch: worker.Config.Prefetch for a route of the
// default concurrency, in proportion for others, at least one when
// prefetching at all.
func (rt *routeTable) prefetchFor(limit int) int {
	if rt.cfg.Prefetch <= 0 {
		return 0
	}
	return min(rt.cfg.ClaimBatch, max(1, rt.cfg.Prefetch*limit/rt.cfg.Workers))
}

// gaugesLocked publishes rs's limit, running and queued rows.
func (rt *routeTable) gaugesLocked(rs *routeState) {
	label := rs.key
	if label == "" {
		label = otherEventTypes
	}
	if rs.gauges == nil {
		rs.gauges = &routeGauges{
			limit:   rt.metrics.routeLimit.WithLabelValues(label),
			running: rt.metrics.routeRunning.WithLabelValues(label),
			queued:  rt.metrics.routeQueued.WithLabelValues(label),
			paused:  rt.metrics.routePaused.WithLabelValues(label),
			breaker: rt.metrics.routeBreaker.WithLabelValues(label),
		}
	}
	paused := 0.0
	if rs.paused {
		paused = 1
	}
	rs.gauges.paused.Set(paused)
	rs.gauges.breaker.Set(float64(rs.breaker))
	rs.gauges.limit.Set(float64(rs.limit))
	rs.gauges.running.Set(float64(rs.running))
	rs.gauges.queued.Set(float64(len(rs.queue) + rs.waiting))
}

// SetControls implements maintenance.RouteControls.
func (rt *routeTable) SetControls(list []driver.RouteControl) (wake bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	controls := make(map[string]driver.RouteControl, len(list))
	for _, c := range list {
		controls[c.Route] = c
	}
	for _, rs := range rt.byKey {
		c := controls[rs.controlName()]
		if c.Paused != rs.paused {
			wake = wake || !c.Paused
			rs.paused = c.Paused
			ev := rt.log.Info().Str("route", rs.label())
			if c.Paused {
				ev.Msg("route paused: claims leave its rows")
			} else {
				ev.Msg("route resumed")
			}
		}
		old, oldBurst := rs.policy.Rate, rs.policy.Burst
		if rt.rateLocked(rs, c) {
			wake = wake || (old > 0 && (rs.policy.Rate == 0 || rs.policy.Rate > old))
			rt.log.Info().Str("route", rs.label()).Float64("rate", rs.policy.Rate).Int("burst", rs.policy.Burst).
				Float64("was_rate", old).Int("was_burst", oldBurst).Bool("override", c.Rate > 0).
				Msg("route rate limit changed")
		}
		if c.BreakerResetAt != nil && (rs.resetSeen == nil || c.BreakerResetAt.After(*rs.resetSeen)) {
			rs.resetSeen = c.BreakerResetAt
			if rs.breaker != breakerClosed {
				rt.log.Info().Str("route", rs.label()).Str("by", c.BreakerResetBy).
					Msg("route breaker closed: reset by an operator")
				wake = true
			}
			rs.breaker, rs.failures = breakerClosed, 0
		}
		rt.gaugesLocked(rs)
	}
	rt.controls = controls
	return wake
}

// rateLocked sets rs's rate limit from the routes file's (fileRate,
// fileBurst) and c's override, which replaces it while set; it reports
// whether the limit changed.
func (rt *routeTable) rateLocked(rs *routeState, c driver.RouteControl) (changed bool) {
	rate, burst := rs.fileRate, rs.fileBurst
	if c.Rate > 0 {
		rate, burst = c.Rate, c.Burst
		if burst <= 0 {
			burst = oneSecondBurst(rate)
		}
	}
	changed = rate != rs.policy.Rate || burst != rs.policy.Burst
	rs.policy.Rate, rs.policy.Burst = rate, burst
	return changed
}

// oneSecondBurst is the bucket of a rate limit that names none: one
// second's worth of its rate, at least one token.
func oneSecondBurst(rate float64) int { return max(1, int(math.Ceil(rate))) }

// claimRoomLocked is how many rows a claim may take for rs now: its room, none
// while it is paused or its breaker open, one row while its breaker is
// half-open and it holds none. An open breaker whose cool-down ended
// half-opens here.
func (rt *routeTable) claimRoomLocked(rs *routeState, now time.Time) int {
	room := rs.room()
	if rs.breaker == breakerOpen && !now.Before(rs.openUntil) {
		rs.breaker = breakerHalfOpen
		rt.log.Info().Str("route", rs.label()).Msg("route breaker half-open: trying one row")
		rt.gaugesLocked(rs)
	}
	switch {
	case rs.paused || rs.breaker == breakerOpen:
		return 0
	case rs.breaker == breakerHalfOpen:
		return min(room, max(0, 1-rs.held()))
	}
	return room
}

// attemptEnded feeds the breaker of j's route with the outcome of an
// attempt: ok for a success, not for a failure (retried or dead). Rows
// released unattempted, and fenced ones, say nothing of the route.
func (rt *routeTable) attemptEnded(j *job, ok bool) {
	if !rt.breakers.Load() {
		return // no route has a breaker: no lock per row for it
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rs := j.route
	if rs == nil || rs.policy.Breaker.Failures == 0 {
		return
	}
	b := rs.policy.Breaker
	switch rs.breaker {
	case breakerClosed:
		if ok {
			rs.failures = 0
			return
		}
		rs.failures++
		if rs.failures < b.Failures {
			return
		}
		rt.openBreakerLocked(rs, "consecutive failures")
	case breakerHalfOpen:
		if ok {
			rs.breaker, rs.failures = breakerClosed, 0
			rt.log.Info().Str("route", rs.label()).Msg("route breaker closed: the trial row succeeded")
			rt.gaugesLocked(rs)
			rt.wake()
			return
		}
		rt.openBreakerLocked(rs, "the trial row failed")
	case breakerOpen:
		// Rows claimed before it opened: already open.
	}
}

// openBreakerLocked opens rs's breaker for its cool-down.
func (rt *routeTable) openBreakerLocked(rs *routeState, why string) {
	b := rs.policy.Breaker
	rs.breaker, rs.openUntil = breakerOpen, rt.clock.Now().Add(b.CoolDown)
	rt.log.Warn().Str("route", rs.label()).Int("failures", rs.failures).Dur("cool_down", b.CoolDown).
		Str("reason", why).Msg("route breaker open: no claims of its rows on this replica until the cool-down ends")
	rt.gaugesLocked(rs)
}

// OrderedTypes returns the types of ordered routes, and those among them
// whose dead rows block their key.
func (rt *routeTable) OrderedTypes() (ordered, blocking []string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	ordered, blocking = []string{}, []string{}
	for key, rs := range rt.byKey {
		if key != "" && rs.policy.Ordered {
			ordered = append(ordered, key)
			if rs.policy.BlocksKey() {
				blocking = append(blocking, key)
			}
		}
	}
	return ordered, blocking
}

// MaxAttemptsByType returns the routes whose max attempts differ from the
// pool's, for the rescuer.
func (rt *routeTable) MaxAttemptsByType() (types []string, max []int32) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	types, max = []string{}, []int32{}
	for key, rs := range rt.byKey {
		if key != "" && rs.policy.MaxAttempts != rt.cfg.MaxAttempts {
			types = append(types, key)
			max = append(max, int32(rs.policy.MaxAttempts))
		}
	}
	return types, max
}

// signalOrdered wakes the claim loop when a row of an ordered route
// finished: the next row of its key was just unparked.
func (rt *routeTable) signalOrdered(eventType string) {
	rt.mu.Lock()
	rs, ok := rt.byKey[eventType]
	ordered := ok && rs.policy.Ordered
	rt.mu.Unlock()
	if ordered {
		rt.wake()
	}
}

// SkipsDead reports whether eventType's route is ordered and lets a key go
// on past a dead row (on_dead: skip).
func (rt *routeTable) SkipsDead(eventType string) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rs, ok := rt.byKey[eventType]
	return ok && rs.policy.Ordered && !rs.policy.BlocksKey()
}

// RescueDelay is how long a row of eventType rescued after its started
// attempt number attempt waits: its route's backoff after that attempt.
func (rt *routeTable) RescueDelay(eventType string, attempt int) time.Duration {
	rt.mu.Lock()
	policy := rt.forLocked(eventType).policy
	rt.mu.Unlock()
	return policy.retry.NextRetry(max(attempt, 1))
}

// maxPrefetch is the most an adaptive prefetch grows to (0: the prefetch
// is fixed, worker.Config.Prefetch).
func (rt *routeTable) maxPrefetch() int {
	if rt.cfg.adaptivePrefetch {
		return 2 * rt.cfg.ClaimBatch
	}
	return 0
}
