package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/ops"
)

// routeCommands are `inboxd route pause|resume|list|rate|reset-breaker|limits`:
// an operator's controls of a route, shared by every replica through the
// database (migrations/012_route_controls.sql, 020_route_limits.sql). A
// paused route's rows are not claimed (rows in flight finish); they stay
// received, so the stale-row gauges and alerts still see them. A rate
// override replaces the routes file's rate until cleared; a breaker reset
// closes the route's open breakers once.
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
		{name: "route rate", args: "TYPE [PER-SECOND]", summary: "override a route's rate limit on every replica within a second, in place of the routes file's, until --clear",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				burst := fs.Int("burst", 0, "the bucket: most rows claimed at once after a pause (`N`; default one second's worth)")
				clear := fs.Bool("clear", false, "clear the override: back to the routes file's rate (none if it has none)")
				by := fs.String("by", "", byUsage)
				return func(cfg config.Config) error {
					return runRouteRate(a.ctx, cfg, a.stdout, a.stderr, a.environ, a.args, *by, *burst, *clear)
				}
			}},
		{name: "route reset-breaker", args: "TYPE", summary: "close a route's open circuit breaker once on every replica within a second",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				by := fs.String("by", "", byUsage)
				return func(cfg config.Config) error {
					return runRouteResetBreaker(a.ctx, cfg, a.stdout, a.stderr, a.environ, a.args, *by)
				}
			}},
		{name: "route limits", summary: "list each route's rate limit (the routes file's and an override) and circuit breaker",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				asJSON := jsonFlag(fs, "print JSON lines")
				return func(cfg config.Config) error { return runRouteLimits(a.ctx, cfg, a.stdout, *asJSON) }
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

// routeControl runs a route command that changes a route's controls: it
// reads the route (args' one), the operator (--by) and connects, then act
// changes the route through ops, whose refusals of what was asked
// (ops.ErrUnknownRoute, ops.ErrBadLimit, ops.ErrNoBreaker) exit as usage
// errors.
func routeControl(ctx context.Context, cfg config.Config, stderr io.Writer, environ, args []string, cmd, by string,
	act func(o *ops.Ops, op ops.Operator, route string, log zerolog.Logger) error) error {
	route, err := routeArg(cmd, args)
	if err != nil {
		return err
	}
	op, err := cliOperator(cmd, by, cfg, environ)
	if err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	log := adminLog(cfg, stderr, cmd)
	err = act(newOps(conn, log, nil, fileRoutes(cfg)), op, route, log)
	var usage usageError
	switch {
	case err == nil || errors.As(err, &usage):
		return err
	case errors.Is(err, ops.ErrUnknownRoute) || errors.Is(err, ops.ErrBadLimit) || errors.Is(err, ops.ErrNoBreaker):
		return usageError{fmt.Errorf("%s: %w", cmd, err)}
	}
	return fmt.Errorf("%s: %w", cmd, err)
}

func runRoutePause(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, environ, args []string, by, reason string) error {
	return routeControl(ctx, cfg, stderr, environ, args, "route pause", by, func(o *ops.Ops, op ops.Operator, route string, log zerolog.Logger) error {
		if _, err := o.Pause(ctx, op, route, reason); err != nil {
			return err
		}
		log.Info().Str("route", route).Str("by", op.Name).Str("reason", reason).
			Msg("route paused: every replica stops claiming its rows within a second")
		warnUnrouted(cfg, stderr, route)
		fmt.Fprintf(stdout, "paused %s (by %s): every replica stops claiming its rows within a second; rows in flight finish\n", routeName(route), op.Name)
		return nil
	})
}
func runRouteResume(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, environ, args []string, by string) error {
	return routeControl(ctx, cfg, stderr, environ, args, "route resume", by, func(o *ops.Ops, op ops.Operator, route string, log zerolog.Logger) error {
		if _, err := o.Resume(ctx, op, route); errors.Is(err, ops.ErrNotPaused) {
			return fmt.Errorf("%s is not paused (inboxd route list shows the paused routes)", routeName(route))
		} else if err != nil {
			return err
		}
		log.Info().Str("route", route).Str("by", op.Name).Msg("route resumed")
		fmt.Fprintf(stdout, "resumed %s: every replica claims its rows again within a second\n", routeName(route))
		return nil
	})
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

func runRouteRate(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, environ, args []string, by string, burst int, clear bool) error {
	const cmd = "route rate"
	var perSecond float64
	switch {
	case clear && len(args) == 1:
		if burst != 0 {
			return usageError{fmt.Errorf("%s: --burst goes with a rate, not with --clear", cmd)}
		}
	case !clear && len(args) == 2:
		r, err := strconv.ParseFloat(args[1], 64)
		if err != nil {
			return usageError{fmt.Errorf("%s: the rate %q is not a number of rows a second", cmd, args[1])}
		}
		perSecond = r
		args = args[:1]
	case clear:
		return usageError{fmt.Errorf("%s --clear: give one route: its event type, or default (also *) for the default route", cmd)}
	default:
		return usageError{fmt.Errorf("%s: give a route and its rate in rows a second (route rate order.created 20), or --clear", cmd)}
	}
	return routeControl(ctx, cfg, stderr, environ, args, cmd, by, func(o *ops.Ops, op ops.Operator, route string, log zerolog.Logger) error {
		if clear {
			if _, err := o.Limits().ClearRate(ctx, op, route); errors.Is(err, ops.ErrNoOverride) {
				return fmt.Errorf("%s has no rate override (inboxd route limits shows them)", routeName(route))
			} else if err != nil {
				return err
			}
			log.Info().Str("route", route).Str("by", op.Name).Msg("route rate override cleared")
			fmt.Fprintf(stdout, "cleared the rate override of %s (by %s): every replica goes back to the routes file's rate within a second\n", routeName(route), op.Name)
			return nil
		}
		if _, err := o.Limits().SetRate(ctx, op, route, perSecond, burst); err != nil {
			return err
		}
		log.Info().Str("route", route).Str("by", op.Name).Float64("rate", perSecond).Int("burst", burst).Msg("route rate overridden")
		warnUnrouted(cfg, stderr, route)
		limit := ops.RouteLimit{OverrideRate: perSecond, OverrideBurst: burst}.Limit()
		fmt.Fprintf(stdout, "%s limited to %s (by %s) on every replica within a second, until route rate %s --clear\n", routeName(route), limit, op.Name, args[0])
		return nil
	})
}
func runRouteResetBreaker(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, environ, args []string, by string) error {
	return routeControl(ctx, cfg, stderr, environ, args, "route reset-breaker", by, func(o *ops.Ops, op ops.Operator, route string, log zerolog.Logger) error {
		if _, err := o.Limits().ResetBreaker(ctx, op, route); err != nil {
			return err
		}
		log.Info().Str("route", route).Str("by", op.Name).Msg("route breaker reset")
		fmt.Fprintf(stdout, "reset the breaker of %s (by %s): every replica where it is open closes it within a second\n", routeName(route), op.Name)
		return nil
	})
}

// routeLimitReport is one line of route limits --json.
type routeLimitReport struct {
	Route           string     `json:"route"`
	Rate            float64    `json:"rate"`            // in force, rows a second (0: none)
	Burst           int        `json:"burst,omitempty"` // 0: one second's worth
	FileRate        float64    `json:"file_rate"`
	FileBurst       int        `json:"file_burst,omitempty"`
	OverrideRate    float64    `json:"override_rate,omitempty"`
	OverrideBurst   int        `json:"override_burst,omitempty"`
	OverrideBy      string     `json:"override_by,omitempty"`
	OverrideAt      *time.Time `json:"override_at,omitempty"`
	BreakerFailures int        `json:"breaker_failures,omitempty"`
	BreakerCoolDown string     `json:"breaker_cool_down,omitempty"`
	BreakerResetBy  string     `json:"breaker_reset_by,omitempty"`
	BreakerResetAt  *time.Time `json:"breaker_reset_at,omitempty"`
}

func runRouteLimits(ctx context.Context, cfg config.Config, stdout io.Writer, asJSON bool) error {
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	list, err := ops.New(ops.Config{DB: conn, Routes: fileRoutes(cfg)}).Limits().List(ctx)
	if err != nil {
		return fmt.Errorf("route limits: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		for _, l := range list {
			r := routeLimitReport{Route: l.Route, FileRate: l.FileRate, FileBurst: l.FileBurst,
				OverrideRate: l.OverrideRate, OverrideBurst: l.OverrideBurst, OverrideBy: l.OverrideBy, OverrideAt: l.OverrideAt,
				BreakerFailures: l.Breaker.Failures, BreakerResetBy: l.BreakerResetBy, BreakerResetAt: l.BreakerResetAt}
			r.Rate, r.Burst = l.Rate()
			if l.Breaker.Failures > 0 {
				r.BreakerCoolDown = l.Breaker.CoolDown.String()
			}
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	if len(list) == 0 {
		_, err := fmt.Fprintln(stdout, "no route has a rate limit or a breaker")
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tRATE LIMIT\tROUTES FILE\tOVERRIDE BY\tBREAKER\tLAST RESET")
	for _, l := range list {
		by, reset := "-", "-"
		if l.OverrideRate > 0 {
			by = l.OverrideBy
		}
		if l.BreakerResetAt != nil {
			reset = l.BreakerResetAt.UTC().Format(time.RFC3339) + " by " + l.BreakerResetBy
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", routeName(l.Route), l.Limit(), l.FileLimit(), by, l.BreakerRule(), reset)
	}
	return errors.Join(tw.Flush())
}
