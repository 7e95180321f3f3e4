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
	rows, err := db.Query(ctx, routeResumeSQL, pgx.NamedArgs{"route": route})
	if err != nil {
		return false, fmt.Errorf("resume route %q: %w", route, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("resume route %q: %w", route, err)
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
