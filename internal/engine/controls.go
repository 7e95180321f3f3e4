package engine

import (
	"context"
	"math"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
)

// The route controls: what an operator or the route's own failures set on
// a route beside its policy. A paused route (driver.PauseRoute, shared by
// the fleet through the database) and a route whose breaker is open (kept
// by each replica for itself) have no room in the claim plan: their rows
// stay received, visible to the stale-row gauges, while the rows in flight
// finish. A rate-limited route's room is cut to the tokens its claim gets
// from the fleet's bucket (driver.TakeTokens). An operator's rate override
// (driver.SetRouteRate) replaces the route's own rate on every replica
// until it is cleared, and a breaker reset (driver.ResetRouteBreaker)
// closes an open or half-open breaker once (routeTable.SetControls).

// controlName is rs's name in the route controls' tables.
func (rs *routeState) controlName() string {
	if rs.key == "" {
		return driver.DefaultRoute
	}
	return rs.key
}

// label is rs's route label in metrics and logs: its event type, "other"
// for the default route.
func (rs *routeState) label() string {
	if rs.key == "" {
		return otherEventTypes
	}
	return rs.key
}

// Breaker states, as the inboxd_route_breaker_state gauge shows them.
type breakerState int

const (
	breakerClosed   breakerState = 0
	breakerOpen     breakerState = 1
	breakerHalfOpen breakerState = 2
)

// burst is a rate-limited route's bucket size: its Burst, else one
// second's worth of its rate, at least one.
func burst(pol routePolicy) float64 {
	if pol.Burst > 0 {
		return float64(pol.Burst)
	}
	return max(1, math.Ceil(pol.Rate))
}

// takeTokens cuts the room req gives the rate-limited routes to the tokens
// their buckets grant (driver.TakeTokens), and records the grants in
// req.tokens for giveBack. A route granted nothing leaves the claim as a
// full route does. It returns how long to wait before the next claim is
// worth it for a route that was cut (0: none was). A failed take grants
// nothing: the rows of those routes wait rather than exceed their rate.
func (c *claimer) takeTokens(req *claimRequest) time.Duration {
	var wants []driver.TokenWant
	c.b.mu.Lock()
	for _, r := range req.rooms {
		rs := c.b.routes.byKey[r.route]
		if rs == nil || rs.policy.Rate <= 0 {
			continue
		}
		wants = append(wants, driver.TokenWant{Route: rs.controlName(), Rate: rs.policy.Rate, Burst: burst(rs.policy), Want: r.room})
	}
	c.b.mu.Unlock()
	if len(wants) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(c.stopCtx, c.cfg.StatementTimeout)
	defer cancel()
	granted, err := driver.TakeTokens(ctx, c.db, wants)
	if err != nil {
		c.metrics.dbErrors.WithLabelValues("claim").Inc()
		c.log.Warn().Err(err).Msg("taking rate limit tokens failed: the rate-limited routes claim nothing this time")
		granted = map[string]int{}
	}
	req.tokens = make(map[string]int, len(wants))
	wait := time.Duration(0)
	cut := make(map[string]int, len(wants))
	for _, w := range wants {
		key := w.Route
		if key == driver.DefaultRoute {
			key = ""
		}
		g := granted[w.Route]
		req.tokens[key] = g
		if g < w.Want {
			cut[key] = g
			c.metrics.routeRateLimited.WithLabelValues(labelOf(key)).Inc()
			// The next token comes in 1/rate.
			next := time.Duration(float64(time.Second) / w.Rate)
			if wait == 0 || next < wait {
				wait = next
			}
		}
	}
	if len(cut) == 0 {
		return 0
	}
	rooms, limit := req.rooms[:0], 0
	for _, r := range req.rooms {
		if g, ok := cut[r.route]; ok {
			r.room, r.idle = g, min(r.idle, g)
		}
		if r.room > 0 {
			rooms = append(rooms, r)
			limit += r.room
			continue
		}
		if r.route == "" {
			req.defaultOpen = false
			continue
		}
		for i, t := range req.open {
			if t == r.route {
				req.open = append(req.open[:i:i], req.open[i+1:]...)
				break
			}
		}
		req.full = append(req.full, r.route)
	}
	req.rooms = rooms
	req.limit = min(req.limit, limit)
	if req.window > 0 {
		req.window = min(req.window, req.limit)
	}
	return min(max(wait, minTokenWait), c.cfg.PollInterval)
}

// minTokenWait is the shortest wait for a rate-limited route's next
// tokens: a fast rate is claimed in batches, not a statement per row.
const minTokenWait = 20 * time.Millisecond

// giveBack returns to the buckets the tokens req was granted and its claim
// did not use (byRoute: the rows it claimed per route).
func (c *claimer) giveBack(req claimRequest, byRoute map[string]int) {
	if len(req.tokens) == 0 {
		return
	}
	var back []driver.TokenWant
	c.b.mu.Lock()
	for key, g := range req.tokens {
		left := g - byRoute[key]
		rs := c.b.routes.byKey[key]
		if left <= 0 || rs == nil || rs.policy.Rate <= 0 {
			continue
		}
		back = append(back, driver.TokenWant{Route: rs.controlName(), Burst: burst(rs.policy), Want: left})
	}
	c.b.mu.Unlock()
	if len(back) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(c.stopCtx, c.cfg.StatementTimeout)
	defer cancel()
	if err := driver.GiveTokens(ctx, c.db, back); err != nil {
		c.metrics.dbErrors.WithLabelValues("claim").Inc()
		c.log.Warn().Err(err).Msg("giving back rate limit tokens failed: the routes' rate is lower for a moment")
	}
}

// labelOf is the route label of the route key key.
func labelOf(key string) string {
	if key == "" {
		return otherEventTypes
	}
	return key
}
