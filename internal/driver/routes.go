package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	routePauseSQL   = load("route_pause.sql")
	routeResumeSQL  = load("route_resume.sql")
	routesPausedSQL = load("routes_paused.sql")
)

// DefaultRoute names the default route (every event type without a route
// of its own) in route_controls and route_tokens.
const DefaultRoute = "*"

// PausedRoute is a route paused by an operator.
type PausedRoute struct {
	// Route is the route's event type, DefaultRoute for the default route.
	Route    string
	PausedBy string
	Reason   string
	PausedAt time.Time
}

// PauseRoute pauses route on every replica (sql/route_pause.sql): claims
// leave its rows, rows in flight finish.
func PauseRoute(ctx context.Context, db DB, route, by, reason string) error {
	if route == "" {
		return fmt.Errorf("pause route: no route")
	}
	if _, err := db.Exec(ctx, routePauseSQL, pgx.NamedArgs{"route": route, "by": by, "reason": reason}); err != nil {
		return fmt.Errorf("pause route %q: %w", route, err)
	}
	return nil
}

// ResumeRoute resumes route (sql/route_resume.sql) and reports whether it
// was paused.
func ResumeRoute(ctx context.Context, db DB, route string) (bool, error) {
	return routeChanged(ctx, db, routeResumeSQL, "resume route", route)
}

// routeChanged runs sql, an UPDATE of route's controls returning the
// route when it changed it, and reports whether it did; what names it in
// its errors.
func routeChanged(ctx context.Context, db DB, sql, what, route string) (bool, error) {
	rows, err := db.Query(ctx, sql, pgx.NamedArgs{"route": route})
	if err != nil {
		return false, fmt.Errorf("%s %q: %w", what, route, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("%s %q: %w", what, route, err)
	}
	return len(got) > 0, nil
}

// PausedRoutes lists the routes paused now (sql/routes_paused.sql).
func PausedRoutes(ctx context.Context, db DB) ([]PausedRoute, error) {
	rows, err := db.Query(ctx, routesPausedSQL)
	if err != nil {
		return nil, fmt.Errorf("read paused routes: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PausedRoute])
	if err != nil {
		return nil, fmt.Errorf("read paused routes: %w", err)
	}
	return out, nil
}

var (
	routeTokensTakeSQL = load("route_tokens_take.sql")
	routeTokensInitSQL = load("route_tokens_init.sql")
	routeTokensGiveSQL = load("route_tokens_give.sql")
)

// TokenWant is what a claim asks of one rate-limited route's bucket.
type TokenWant struct {
	Route string  // the route's event type, DefaultRoute for the default route
	Rate  float64 // tokens a second
	Burst float64 // most tokens the bucket holds
	Want  int     // tokens wanted
}

// TakeTokens takes tokens from the buckets of wants' routes
// (sql/route_tokens_take.sql) and returns how many each route was
// granted; a route without a bucket gets one, full (sql/route_tokens_init.sql),
// and is asked again.
func TakeTokens(ctx context.Context, db DB, wants []TokenWant) (map[string]int, error) {
	granted, err := takeTokens(ctx, db, wants)
	if err != nil {
		return nil, err
	}
	var missing []TokenWant
	for _, w := range wants {
		if _, ok := granted[w.Route]; !ok {
			missing = append(missing, w)
		}
	}
	if len(missing) == 0 {
		return granted, nil
	}
	routes, bursts := make([]string, len(missing)), make([]float64, len(missing))
	for i, w := range missing {
		routes[i], bursts[i] = w.Route, w.Burst
	}
	if _, err := db.Exec(ctx, routeTokensInitSQL, pgx.NamedArgs{"routes": routes, "bursts": bursts}); err != nil {
		return nil, fmt.Errorf("make rate limit buckets: %w", err)
	}
	more, err := takeTokens(ctx, db, missing)
	if err != nil {
		return nil, err
	}
	for r, n := range more {
		granted[r] = n
	}
	return granted, nil
}

func takeTokens(ctx context.Context, db DB, wants []TokenWant) (map[string]int, error) {
	n := len(wants)
	routes, rates, bursts, want := make([]string, n), make([]float64, n), make([]float64, n), make([]int32, n)
	for i, w := range wants {
		routes[i], rates[i], bursts[i], want[i] = w.Route, w.Rate, w.Burst, int32(w.Want)
	}
	rows, err := db.Query(ctx, routeTokensTakeSQL, pgx.NamedArgs{"routes": routes, "rates": rates, "bursts": bursts, "wants": want})
	if err != nil {
		return nil, fmt.Errorf("take rate limit tokens: %w", err)
	}
	granted := make(map[string]int, n)
	var route string
	var got int32
	if _, err := pgx.ForEachRow(rows, []any{&route, &got}, func() error {
		granted[route] = int(got)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("take rate limit tokens: %w", err)
	}
	return granted, nil
}

// GiveTokens gives back tokens taken by TakeTokens and not used
// (sql/route_tokens_give.sql): Want is the number given back.
func GiveTokens(ctx context.Context, db DB, back []TokenWant) error {
	n := len(back)
	routes, bursts, tokens := make([]string, n), make([]float64, n), make([]int32, n)
	for i, w := range back {
		routes[i], bursts[i], tokens[i] = w.Route, w.Burst, int32(w.Want)
	}
	if _, err := db.Exec(ctx, routeTokensGiveSQL, pgx.NamedArgs{"routes": routes, "bursts": bursts, "tokens": tokens}); err != nil {
		return fmt.Errorf("give back rate limit tokens: %w", err)
	}
	return nil
}

var (
	routeControlsSQL     = load("route_controls.sql")
	routeRateSetSQL      = load("route_rate_set.sql")
	routeRateClearSQL    = load("route_rate_clear.sql")
	routeBreakerResetSQL = load("route_breaker_reset.sql")
)

// RouteControl is what an operator set on one route: its pause, its rate
// override and its last breaker reset (migrations 012 and 020).
type RouteControl struct {
	// Route is the route's event type, DefaultRoute for the default route.
	Route string
	// Paused, PausedBy, Reason and PausedAt are its pause (PausedAt nil
	// while it is not paused).
	Paused           bool
	PausedBy, Reason string
	PausedAt         *time.Time
	// Rate overrides the routes file's rate limit, in rows a second on the
	// whole fleet (0: no override); Burst is its bucket (0: one second's
	// worth). RateBy and RateAt say who set it and when.
	Rate   float64
	Burst  int
	RateBy string
	RateAt *time.Time
	// BreakerResetAt is when the route's breaker was last reset (nil:
	// never), by BreakerResetBy.
	BreakerResetBy string
	BreakerResetAt *time.Time
}

// RouteControls reads every route's controls, in route order
// (sql/route_controls.sql).
func RouteControls(ctx context.Context, db DB) ([]RouteControl, error) {
	rows, err := db.Query(ctx, routeControlsSQL)
	if err != nil {
		return nil, fmt.Errorf("read the route controls: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[RouteControl])
	if err != nil {
		return nil, fmt.Errorf("read the route controls: %w", err)
	}
	return out, nil
}

// SetRouteRate overrides route's rate limit on every replica
// (sql/route_rate_set.sql): rate rows a second (> 0), burst tokens (0: one
// second's worth), set by by.
func SetRouteRate(ctx context.Context, db DB, route string, rate float64, burst int, by string) error {
	if route == "" {
		return fmt.Errorf("set route rate: no route")
	}
	var b *int
	if burst > 0 {
		b = &burst
	}
	if _, err := db.Exec(ctx, routeRateSetSQL, pgx.NamedArgs{"route": route, "rate": rate, "burst": b, "by": by}); err != nil {
		return fmt.Errorf("set the rate of route %q: %w", route, err)
	}
	return nil
}

// ClearRouteRate clears route's rate override (sql/route_rate_clear.sql)
// and reports whether it had one.
func ClearRouteRate(ctx context.Context, db DB, route string) (bool, error) {
	return routeChanged(ctx, db, routeRateClearSQL, "clear the rate of route", route)
}

// ResetRouteBreaker records a reset of route's circuit breaker by by
// (sql/route_breaker_reset.sql): every replica whose breaker is open or
// half-open closes it once. It returns the reset's time.
func ResetRouteBreaker(ctx context.Context, db DB, route, by string) (time.Time, error) {
	if route == "" {
		return time.Time{}, fmt.Errorf("reset route breaker: no route")
	}
	var at time.Time
	if err := db.QueryRow(ctx, routeBreakerResetSQL, pgx.NamedArgs{"route": route, "by": by}).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("reset the breaker of route %q: %w", route, err)
	}
	return at, nil
}
