package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
)

// ErrUnknownRoute is wrapped by Pause when neither the routes file nor the
// database knows the route.
var ErrUnknownRoute = errors.New("no such route")

// ErrNotPaused is wrapped by Resume when the route is not paused.
var ErrNotPaused = errors.New("the route is not paused")

// checkRoute refuses a route that neither the routes file (Config.Routes)
// nor the database knows; the default route (driver.DefaultRoute) is
// always known.
func (o *Ops) checkRoute(ctx context.Context, route string) error {
	if strings.TrimSpace(route) == "" {
		return errors.New("say which route: its event type, or * for the default route")
	}
	if route == driver.DefaultRoute {
		return nil
	}
	if _, ok, err := o.cfg.fileRoute(route); err != nil || ok {
		return err
	}
	ok, err := driver.RouteKnown(ctx, o.cfg.DB, route)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %q is in no routes file and none of its rows was processed, retried or died in the last eight days (route list shows the paused ones)", ErrUnknownRoute, route)
	}
	return nil
}

// fileRoute returns route's entry in the routes file (Config.Routes), and
// whether it has one.
func (c Config) fileRoute(route string) (handlers.RouteConfig, bool, error) {
	if c.Routes == nil {
		return handlers.RouteConfig{}, false, nil
	}
	routes, err := c.Routes()
	if err != nil {
		return handlers.RouteConfig{}, false, fmt.Errorf("read the routes file: %w", err)
	}
	i := slices.IndexFunc(routes, func(rc handlers.RouteConfig) bool { return rc.Type == route })
	if i < 0 {
		return handlers.RouteConfig{}, false, nil
	}
	return routes[i], true, nil
}

// Pause pauses route on every replica (rows in flight finish; its rows
// stay received), recorded as paused by the operator with reason.
func (o *Ops) Pause(ctx context.Context, op Operator, route, reason string) (Result, error) {
	if err := op.check(); err != nil {
		return Result{}, err
	}
	req := Request{Operator: op, Reason: reason}
	if err := o.checkRoute(ctx, route); err != nil {
		return Result{}, err
	}
	err := driver.PauseRoute(ctx, o.cfg.DB, route, op.Name, reason)
	return o.finish(ctx, req, ActPause, routeDetail(route, reason), nil, Result{}, err)
}

// Resume resumes a paused route; the error wraps ErrNotPaused when it was
// not paused.
func (o *Ops) Resume(ctx context.Context, op Operator, route string) (Result, error) {
	if err := op.check(); err != nil {
		return Result{}, err
	}
	was, err := driver.ResumeRoute(ctx, o.cfg.DB, route)
	if err == nil && !was {
		err = fmt.Errorf("%w: %q", ErrNotPaused, route)
	}
	res := Result{}
	if was {
		res.Rows = 1
	}
	return o.finish(ctx, Request{Operator: op}, ActResume, routeDetail(route, ""), nil, res, err)
}

// routeDetail is an audit entry's detail for a route's control.
func routeDetail(route, reason string) string {
	if reason == "" {
		return "route " + route
	}
	return "route " + route + ": " + reason
}
