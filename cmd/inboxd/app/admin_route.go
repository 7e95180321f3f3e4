package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/ops"
)

// routeCommands are `inboxd route pause|resume|list`: an operator's
// controls of a route, shared by every replica through the database
// (migrations/012_route_controls.sql). A paused route's rows are not
// claimed (rows in flight finish); they stay received, so the stale-row
// gauges and alerts still see them.
func routeCommands() []command {
	return []command{
		{name: "route pause", args: "TYPE", summary: "pause a route on every replica within a second: its rows stay received, rows in flight finish (TYPE * or default: the default route)",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				reason := fs.String("reason", "", "why, for whoever looks next (`TEXT`)")
				by := fs.String("by", "", byUsage)
				return func(cfg config.Config) error {
					return runRoutePause(a.ctx, cfg, a.stdout, a.stderr, a.environ, a.args, *by, *reason)
				}
			}},
		{name: "route resume", args: "TYPE", summary: "resume a paused route: every replica claims its rows again within a second",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				by := fs.String("by", "", byUsage)
				return func(cfg config.Config) error {
					return runRouteResume(a.ctx, cfg, a.stdout, a.stderr, a.environ, a.args, *by)
				}
			}},
		{name: "route list", summary: "list the paused routes, with who paused them, when and why",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				asJSON := jsonFlag(fs, "print JSON lines")
				return func(cfg config.Config) error { return runRouteList(a.ctx, cfg, a.stdout, *asJSON) }
			}},
	}
}

// routeArg is the route named by route pause and resume's one argument:
// an event type, or * or default for the default route.
func routeArg(cmd string, args []string) (string, error) {
	if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
		return "", usageError{fmt.Errorf("%s: give one route: its event type, or default (also *) for the default route", cmd)}
	}
	switch args[0] {
	case "default", driver.DefaultRoute:
		return driver.DefaultRoute, nil
	}
	return args[0], nil
}

// routeName is how the route commands print route.
func routeName(route string) string {
	if route == driver.DefaultRoute {
		return "default (*)"
	}
	return route
}

// warnUnrouted warns on stderr when the routes file (INBOXD_ROUTES, if
// set and readable) has no route for route: its rows go to the default
// route, so pausing it has no effect until it has one.
func warnUnrouted(cfg config.Config, stderr io.Writer, route string) {
	if cfg.Routes == "" || route == driver.DefaultRoute {
		return
	}
	routes, err := fileRoutes(cfg)()
	if err != nil || slices.ContainsFunc(routes, func(rc handlers.RouteConfig) bool { return rc.Type == route }) {
		return
	}
	fmt.Fprintf(stderr, "inboxd: warning: %s has no route of its own in INBOXD_ROUTES: its rows go to the default route, "+
		"which this pause does not stop (pause default for that)\n", route)
}

func runRoutePause(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, environ, args []string, by, reason string) error {
	route, err := routeArg("route pause", args)
	if err != nil {
		return err
	}
	op, err := cliOperator("route pause", by, cfg, environ)
	if err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	log := adminLog(cfg, stderr, "route pause")
	if _, err := newOps(conn, log, nil, fileRoutes(cfg)).Pause(ctx, op, route, reason); err != nil {
		if errors.Is(err, ops.ErrUnknownRoute) {
			return usageError{fmt.Errorf("route pause: %w", err)}
		}
		return fmt.Errorf("route pause: %w", err)
	}
	log.Info().Str("route", route).Str("by", op.Name).Str("reason", reason).
		Msg("route paused: every replica stops claiming its rows within a second")
	warnUnrouted(cfg, stderr, route)
	fmt.Fprintf(stdout, "paused %s (by %s): every replica stops claiming its rows within a second; rows in flight finish\n", routeName(route), op.Name)
	return nil
}

func runRouteResume(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, environ, args []string, by string) error {
	route, err := routeArg("route resume", args)
	if err != nil {
		return err
	}
	op, err := cliOperator("route resume", by, cfg, environ)
	if err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	log := adminLog(cfg, stderr, "route resume")
	if _, err := newOps(conn, log, nil, nil).Resume(ctx, op, route); errors.Is(err, ops.ErrNotPaused) {
		return fmt.Errorf("route resume: %s is not paused (inboxd route list shows the paused routes)", routeName(route))
	} else if err != nil {
		return fmt.Errorf("route resume: %w", err)
	}
	log.Info().Str("route", route).Str("by", op.Name).Msg("route resumed")
	fmt.Fprintf(stdout, "resumed %s: every replica claims its rows again within a second\n", routeName(route))
	return nil
}

// pausedRouteReport is one line of route list --json.
type pausedRouteReport struct {
	Route    string    `json:"route"`
	PausedBy string    `json:"paused_by"`
	PausedAt time.Time `json:"paused_at"`
	Reason   string    `json:"reason"`
}

func runRouteList(ctx context.Context, cfg config.Config, stdout io.Writer, asJSON bool) error {
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	paused, err := driver.PausedRoutes(ctx, conn)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		for _, p := range paused {
			if err := enc.Encode(pausedRouteReport{Route: p.Route, PausedBy: p.PausedBy, PausedAt: p.PausedAt, Reason: p.Reason}); err != nil {
				return err
			}
		}
		return nil
	}
	if len(paused) == 0 {
		_, err := fmt.Fprintln(stdout, "no route is paused")
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tPAUSED BY\tPAUSED AT\tREASON")
	for _, p := range paused {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", routeName(p.Route), p.PausedBy, p.PausedAt.UTC().Format(time.RFC3339), oneLineText(p.Reason))
	}
	return errors.Join(tw.Flush())
}

// oneLineText keeps a free text on one line of a table.
func oneLineText(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
