package inboxd

import (
	"context"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
)

// DefaultRoute names the default route (every event type without a route
// of its own) in PauseRoute, ResumeRoute and PausedRoute.Route.
const DefaultRoute = driver.DefaultRoute

// PausedRoute is a route paused by an operator.
type PausedRoute struct {
	// Route is the route's event type, or DefaultRoute.
	Route string
	// PausedBy says who paused it (`inboxd route pause` writes $USER@host).
	PausedBy string
	// Reason says why.
	Reason string
	// PausedAt is when it was first paused.
	PausedAt time.Time
}

// PauseRoute pauses route, an event type with a route of its own or
// DefaultRoute, on every replica that shares the database: from their next
// read of the paused routes (within about half a second) their claims
// leave its rows, which stay received (so the stale-row gauges and alerts
// still see them); rows in flight finish. The pause is stored in the
// database (table route_controls): it survives restarts until ResumeRoute.
// by and reason say who paused it and why; pausing a paused route keeps
// its first pauser and time, and updates the reason. Pausing a type that
// has no route of its own stores the pause but stops nothing: its rows go
// to the default route.
func (ib *Inboxd) PauseRoute(ctx context.Context, route, by, reason string) error {
	if err := driver.PauseRoute(ctx, ib.db, route, by, reason); err != nil {
		return err
	}
	ib.log.Info().Str("route", route).Str("by", by).Str("reason", reason).Msg("route paused")
	return nil
}

// ResumeRoute resumes a route paused by PauseRoute (or `inboxd route
// pause`): every replica claims its rows again within about half a second.
// It reports whether the route was paused.
func (ib *Inboxd) ResumeRoute(ctx context.Context, route string) (bool, error) {
	was, err := driver.ResumeRoute(ctx, ib.db, route)
	if err != nil {
		return false, err
	}
	if was {
		ib.log.Info().Str("route", route).Msg("route resumed")
	}
	return was, nil
}

// PausedRoutes lists the routes paused now, in route order.
func (ib *Inboxd) PausedRoutes(ctx context.Context) ([]PausedRoute, error) {
	list, err := driver.PausedRoutes(ctx, ib.db)
	if err != nil {
		return nil, err
	}
	out := make([]PausedRoute, len(list))
	for i, p := range list {
		out[i] = PausedRoute{Route: p.Route, PausedBy: p.PausedBy, Reason: p.Reason, PausedAt: p.PausedAt}
	}
	return out, nil
}
