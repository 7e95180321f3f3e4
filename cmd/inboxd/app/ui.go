package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/console"
	"github.com/inboxd/inboxd/internal/httpserve"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/internal/opfiles/routesfile"
)

// consoleConns is the size of the console's own pool: a page or an action
// at a time needs one, and the console never takes the engine's
// connections.
const consoleConns = 3

// uiCommand is `inboxd ui`: the console alone, without workers.
func uiCommand() command {
	return command{name: "ui", summary: "serve the operator console alone on INBOXD_HTTP_ADDR under /ui/ (no workers; with INBOXD_UI_TOKEN_FILE every page asks for the token, without it only a loopback address serves it, read-only)",
		setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
			return func(cfg config.Config) error { return runUI(a.ctx, cfg, a.stderr) }
		}}
}

// consoleEnable says how to serve a console that is not served.
const consoleEnable = "set INBOXD_UI_USERS_FILE, INBOXD_UI_TOKEN_FILE or INBOXD_UI_PROXY_HEADER (every page then asks for a credential), or serve on a loopback address " +
	"(INBOXD_HTTP_ADDR=127.0.0.1:8080) for a read-only console without sign-in"

// consoleServed reports whether the console may be served on addr (nil:
// an embedder's mux, whose address is not known): with a credential
// configured (a token, a users file, a proxy) always, since every page
// needs it; without one only on a loopback address, where only this
// machine reaches it.
func consoleServed(credential bool, addr net.Addr) bool {
	if credential {
		return true
	}
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// addrString is addr as a log line shows it ("mux": an embedder's mux).
func addrString(addr net.Addr) string {
	if addr == nil {
		return "mux"
	}
	return addr.String()
}

// openConsole opens the console's pool and returns the console of cfg to
// serve on addr (nil: an embedder's mux), local the replica's own figures
// (nil for `inboxd ui`), routes the routes in force (which keys are
// ordered, which dead rows block theirs), and a function that closes the pool. Where the
// console may not be served (no token on a non-loopback address), it
// logs how to serve it and returns a nil handler, opening no pool.
func openConsole(ctx context.Context, cfg config.Config, local console.Local, routes *routesInForce, addr net.Addr, log zerolog.Logger) (http.Handler, func(), error) {
	token, err := cfg.UIToken()
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("INBOXD_UI_TOKEN_FILE: %w", err)}
	}
	proxy, err := console.ParseProxy(cfg.UIProxyHeader, cfg.UITrustedProxies, cfg.UIProxyRole, cfg.UIProxySignOutURL)
	if err != nil {
		return nil, nil, usageError{err}
	}
	clog := log.With().Str("component", "console").Str("addr", addrString(addr)).Logger()
	credential := token != "" || cfg.UIUsersFile != "" || proxy.Header != ""
	if !consoleServed(credential, addr) {
		clog.Warn().Str("enable", consoleEnable).
			Msg("the console (/ui/) is not served: no credential is configured and the address is not a loopback address")
		return nil, func() {}, nil
	}
	rules, err := rejectedRules(cfg)
	if err != nil {
		return nil, nil, err
	}
	db, err := openPool(ctx, cfg, "inboxd-console", consoleConns)
	if err != nil {
		return nil, nil, err
	}
	h, err := console.New(console.Config{DB: db, Token: token, UsersFile: cfg.UIUsersFile, Proxy: proxy,
		SessionTTL: cfg.UISessionTTL, BulkAdminOver: cfg.UIBulkAdminOver, ShowPayloads: cfg.UIShowPayloads,
		StaleAfter: cfg.StaleAfter, Local: local, Logger: log, BlockingTypes: routes.blocking, OrderedTypes: routes.ordered,
		// A rejected row is re-mapped by the rules `inboxd requeue
		// --status rejected` applies, with this process's mapping settings
		// and webhook sources.
		Remap: rules.remapper(), Routes: fileRoutes(cfg), MaxAttempts: maxAttemptsOf(cfg)})
	if err != nil {
		db.Close()
		return nil, nil, usageError{fmt.Errorf("INBOXD_UI_USERS_FILE: %w", err)}
	}
	if !credential {
		clog.Info().Msg("the console (/ui/) is read-only and asks for no sign-in: INBOXD_UI_TOKEN_FILE is not set, and only this machine reaches the loopback address")
	} else {
		clog.Info().Bool("users_file", cfg.UIUsersFile != "").Bool("shared_token", token != "").Str("proxy_header", proxy.Header).
			Msg("the console (/ui/) asks for a credential on every page")
	}
	return h, db.Close, nil
}

// mountConsole adds the console h to mux under /ui/; with h nil (not
// served), a 404 that says where to look.
func mountConsole(mux *http.ServeMux, h http.Handler) {
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "the console is not served on this address: see the daemon's start-up log (component=console)", http.StatusNotFound)
		})
	}
	mux.Handle(console.Prefix, h)
}

// runUI serves the console alone on INBOXD_HTTP_ADDR until ctx ends.
func runUI(ctx context.Context, cfg config.Config, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	if cfg.HTTPAddr == "" {
		return usageError{errors.New("ui: INBOXD_HTTP_ADDR is empty: say where to serve the console")}
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	conn.Close(context.WithoutCancel(ctx))
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return usageError{fmt.Errorf("INBOXD_HTTP_ADDR: cannot listen on %s: %w", cfg.HTTPAddr, err)}
	}
	defer ln.Close()
	inForce := &routesInForce{}
	if cfg.Routes != "" {
		// The routes file says which keys a dead row blocks; its handlers
		// are never run here.
		routes, err := routesfile.Load(cfg.Routes)
		if err != nil {
			return usageError{fmt.Errorf("ui: INBOXD_ROUTES (which dead rows block their key): %w", err)}
		}
		var ordered []handlers.Route
		blocking := []string{}
		for _, rc := range routes.Routes {
			if p := rc.Policy(); p.Ordered {
				ordered = append(ordered, handlers.Route{Type: rc.Type, Policy: p})
				if p.BlocksKey() {
					blocking = append(blocking, rc.Type)
				}
			}
		}
		inForce.setRoutes(ordered, blocking)
	}
	h, closeDB, err := openConsole(ctx, cfg, nil, inForce, ln.Addr(), log)
	if err != nil {
		return err
	}
	defer closeDB()
	if h == nil {
		return usageError{fmt.Errorf("ui: the console is not served on %s without a credential (not a loopback address): %s", ln.Addr(), consoleEnable)}
	}
	return serveConsole(ctx, ln, h, log)
}

// serveConsole serves h under /ui/ on ln (and redirects / there) until
// ctx ends.
func serveConsole(ctx context.Context, ln net.Listener, h http.Handler, log zerolog.Logger) error {
	mux := http.NewServeMux()
	mountConsole(mux, h)
	mux.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusSeeOther))
	srv := httpserve.New(mux, defaultHTTPServerLimits(), log.With().Str("component", "http").Logger())
	log.Info().Str("addr", ln.Addr().String()).Msg("serving the console under /ui/")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-done
	return nil
}

// routesInForce is what the console knows of the routes in force: the
// event types of the ordered routes, and of those whose dead rows hold
// their key back, set at start and at each reload of the routes file.
type routesInForce struct{ types atomic.Pointer[orderedTypes] }

// orderedTypes are the event types of the ordered routes, and of those
// whose dead rows block their key.
type orderedTypes struct{ ordered, blocking []string }

// set makes the routes of reg the routes in force.
func (r *routesInForce) set(reg *handlers.Registry) {
	var ordered []handlers.Route
	for _, rt := range reg.Routes() {
		if rt.Policy.Ordered {
			ordered = append(ordered, rt)
		}
	}
	r.setRoutes(ordered, maintenance.RegistryBlockingTypes(reg))
}

// setRoutes makes ordered, and blocking, the routes in force.
func (r *routesInForce) setRoutes(ordered []handlers.Route, blocking []string) {
	t := &orderedTypes{ordered: []string{}, blocking: append([]string{}, blocking...)}
	for _, rt := range ordered {
		t.ordered = append(t.ordered, rt.Type)
	}
	r.types.Store(t)
}

// blocking returns the event types of the routes in force whose dead rows
// hold their key back.
func (r *routesInForce) blocking() []string {
	if t := r.types.Load(); t != nil {
		return t.blocking
	}
	return []string{}
}

// ordered returns the event types of the ordered routes in force.
func (r *routesInForce) ordered() []string {
	if t := r.types.Load(); t != nil {
		return t.ordered
	}
	return []string{}
}

// openConsole's pool is a console.DB.
var _ console.DB = (*pgxpool.Pool)(nil)
