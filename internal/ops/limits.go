package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
)

// ErrBadLimit is wrapped by SetRate when the rate or the burst asked for
// is out of bounds.
var ErrBadLimit = errors.New("bad rate limit")

// ErrNoOverride is wrapped by ClearRate when the route's rate is not
// overridden.
var ErrNoOverride = errors.New("the route's rate is not overridden")

// ErrNoBreaker is wrapped by ResetBreaker when the routes file gives the
// route no circuit breaker.
var ErrNoBreaker = errors.New("the route has no circuit breaker")

// checkLimit refuses a rate override out of bounds: a rate must be more
// than 0 rows a second (pausing stops a route; clearing the override goes
// back to the routes file's rate) and at most handlers.MaxRate, a burst
// between 0 (one second's worth) and handlers.MaxBurst.
func checkLimit(perSecond float64, burst int) error {
	switch {
	case math.IsNaN(perSecond) || perSecond <= 0:
		return fmt.Errorf("%w: the rate must be more than 0 rows a second, got %s "+
			"(to stop a route, pause it; to go back to the routes file's rate, clear the override)", ErrBadLimit, rateText(perSecond))
	case perSecond > handlers.MaxRate:
		return fmt.Errorf("%w: the rate must be at most %d rows a second, got %s", ErrBadLimit, handlers.MaxRate, rateText(perSecond))
	case burst < 0 || burst > handlers.MaxBurst:
		return fmt.Errorf("%w: the burst must be between 1 and %d rows (0 or none: one second's worth), got %d", ErrBadLimit, handlers.MaxBurst, burst)
	}
	return nil
}

// Limits are an admin's controls of the routes' rate limits and circuit
// breakers, shared by every replica through the route controls: the
// operations of Ops.Limits.
type Limits struct{ o *Ops }

// Limits returns the operations on the routes' rate limits and breakers.
func (o *Ops) Limits() Limits { return Limits{o} }

// SetRate overrides route's rate limit on every replica, within about
// half a second: perSecond rows a second on the whole fleet, with a bucket
// of burst rows (0: one second's worth), in place of the routes file's
// rate (or of none) until ClearRate. The route must be known (as for
// Pause); the change is audited as rate_change.
func (l Limits) SetRate(ctx context.Context, op Operator, route string, perSecond float64, burst int) (Result, error) {
	if err := op.check(); err != nil {
		return Result{}, err
	}
	if err := checkLimit(perSecond, burst); err != nil {
		return Result{}, err
	}
	if err := l.o.checkRoute(ctx, route); err != nil {
		return Result{}, err
	}
	err := driver.SetRouteRate(ctx, l.o.cfg.DB, route, perSecond, burst, op.Name)
	detail := fmt.Sprintf("route %s: rate %s", route, limitText(perSecond, burst))
	return l.o.finish(ctx, Request{Operator: op}, ActRateChange, detail, nil, Result{Rows: 1}, err)
}

// ClearRate clears route's rate override: every replica goes back to the
// routes file's rate (none if it has none) within about half a second.
// The error wraps ErrNoOverride when there was none; audited as
// rate_change.
func (l Limits) ClearRate(ctx context.Context, op Operator, route string) (Result, error) {
	if err := op.check(); err != nil {
		return Result{}, err
	}
	was, err := driver.ClearRouteRate(ctx, l.o.cfg.DB, route)
	if err == nil && !was {
		err = fmt.Errorf("%w: %q", ErrNoOverride, route)
	}
	res := Result{}
	if was {
		res.Rows = 1
	}
	return l.o.finish(ctx, Request{Operator: op}, ActRateChange, "route "+route+": rate override cleared", nil, res, err)
}

// ResetBreaker closes route's circuit breaker once on every replica where
// it is open or half-open, within about half a second (it opens again on
// its next failures). The route must be known, and must have a breaker
// when the routes file names it (ErrNoBreaker); audited as breaker_reset.
func (l Limits) ResetBreaker(ctx context.Context, op Operator, route string) (Result, error) {
	if err := op.check(); err != nil {
		return Result{}, err
	}
	if err := l.o.checkRoute(ctx, route); err != nil {
		return Result{}, err
	}
	if rc, ok, err := l.o.cfg.fileRoute(route); err != nil {
		return Result{}, err
	} else if ok && rc.Breaker.Failures == 0 {
		return Result{}, fmt.Errorf("%w: the routes file gives %q none (breaker: {failures: N, cool_down: D})", ErrNoBreaker, route)
	}
	_, err := driver.ResetRouteBreaker(ctx, l.o.cfg.DB, route, op.Name)
	return l.o.finish(ctx, Request{Operator: op}, ActBreakerReset, "route "+route, nil, Result{Rows: 1}, err)
}

// RouteLimit is one route's rate limit and circuit breaker, as the routes
// file gives them and an operator changed them.
type RouteLimit struct {
	// Route is the route's event type, driver.DefaultRoute for the
	// default route.
	Route string
	// FileRate and FileBurst are the routes file's rate limit (0: none;
	// a burst of 0: one second's worth).
	FileRate  float64
	FileBurst int
	// OverrideRate and OverrideBurst are an operator's override (a rate of
	// 0: none), set by OverrideBy at OverrideAt.
	OverrideRate  float64
	OverrideBurst int
	OverrideBy    string
	OverrideAt    *time.Time
	// Breaker is the routes file's circuit breaker (Failures 0: none).
	Breaker handlers.Breaker
	// BreakerResetAt is the last reset of the breaker (nil: none), by
	// BreakerResetBy.
	BreakerResetBy string
	BreakerResetAt *time.Time
	// BreakerState is the breaker in the replica the operations run in:
	// closed, open or half-open; "" when unknown (no replica here) or the
	// route has no breaker.
	BreakerState string
}

// Rate returns the rate limit in force: the override's, else the routes
// file's (0: none), with its burst (0: one second's worth).
func (l RouteLimit) Rate() (perSecond float64, burst int) {
	if l.OverrideRate > 0 {
		return l.OverrideRate, l.OverrideBurst
	}
	return l.FileRate, l.FileBurst
}

// Limit says the rate limit in force for a person: "20/s (burst 5)",
// "none".
func (l RouteLimit) Limit() string {
	r, b := l.Rate()
	if r <= 0 {
		return "none"
	}
	return limitText(r, b)
}

// FileLimit says the routes file's rate limit for a person ("none").
func (l RouteLimit) FileLimit() string {
	if l.FileRate <= 0 {
		return "none"
	}
	return limitText(l.FileRate, l.FileBurst)
}

// OverrideLimit says the override's rate limit for a person ("" when
// there is none).
func (l RouteLimit) OverrideLimit() string {
	if l.OverrideRate <= 0 {
		return ""
	}
	return limitText(l.OverrideRate, l.OverrideBurst)
}

// BreakerRule says the routes file's breaker for a person: "opens after
// 5 failures for 1m0s", "none".
func (l RouteLimit) BreakerRule() string {
	if l.Breaker.Failures == 0 {
		return "none"
	}
	return fmt.Sprintf("opens after %d failures for %s", l.Breaker.Failures, l.Breaker.CoolDown)
}

// List returns the rate limit and breaker of every route of the
// routes file and of every route with an operator's override or breaker
// reset, in route order, with the breaker's state in this replica when
// known (Config.Breakers).
func (lim Limits) List(ctx context.Context) ([]RouteLimit, error) {
	controls, err := driver.RouteControls(ctx, lim.o.cfg.DB)
	if err != nil {
		return nil, err
	}
	by := map[string]*RouteLimit{}
	var out []*RouteLimit
	get := func(route string) *RouteLimit {
		if by[route] == nil {
			by[route] = &RouteLimit{Route: route}
			out = append(out, by[route])
		}
		return by[route]
	}
	if lim.o.cfg.Routes != nil {
		routes, err := lim.o.cfg.Routes()
		if err != nil {
			return nil, fmt.Errorf("read the routes file: %w", err)
		}
		for _, rc := range routes {
			r := get(rc.Type)
			r.FileRate, r.FileBurst, r.Breaker = rc.Rate, rc.Burst, rc.Breaker
		}
	}
	for _, c := range controls {
		if c.Rate <= 0 && c.BreakerResetAt == nil && by[c.Route] == nil {
			continue // a pause alone: the paused routes show it
		}
		r := get(c.Route)
		r.OverrideRate, r.OverrideBurst, r.OverrideBy, r.OverrideAt = c.Rate, c.Burst, c.RateBy, c.RateAt
		r.BreakerResetBy, r.BreakerResetAt = c.BreakerResetBy, c.BreakerResetAt
	}
	var states map[string]string
	if lim.o.cfg.Breakers != nil {
		states = lim.o.cfg.Breakers()
	}
	list := make([]RouteLimit, len(out))
	for i, r := range out {
		// A route without a breaker reads "closed" in the metrics: only a
		// breaker's state, or one that is not closed, says something.
		if st := states[r.Route]; r.Breaker.Failures > 0 || (st != "" && st != "closed") {
			r.BreakerState = st
		}
		list[i] = *r
	}
	slices.SortFunc(list, func(a, b RouteLimit) int { return cmp.Compare(a.Route, b.Route) })
	return list, nil
}

// limitText is a rate limit for a person: "20/s (burst 5)", "20/s (burst:
// one second's worth)".
func limitText(perSecond float64, burst int) string {
	if burst <= 0 {
		return rateText(perSecond) + "/s (burst: one second's worth)"
	}
	return fmt.Sprintf("%s/s (burst %d)", rateText(perSecond), burst)
}

// rateText is a rate in rows a second, as short as it is exact.
func rateText(perSecond float64) string {
	return strconv.FormatFloat(perSecond, 'g', -1, 64)
}
