package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/console"
)

// consoleConns is the size of the console's own pool: a page or an action
// at a time needs one, and the console never takes the engine's
// connections.
const consoleConns = 3

// uiCommand is `inboxd ui`: the console alone, without workers.
func uiCommand() command {
	return command{name: "ui", summary: "serve the operator console alone on INBOXD_HTTP_ADDR under /ui/ (no workers; INBOXD_UI_TOKEN_FILE allows actions)",
		setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
			return func(cfg config.Config) error { return runUI(a.ctx, cfg, a.stderr) }
		}}
}

// openConsole opens the console's pool and returns the console of cfg,
// local the replica's own figures (nil for `inboxd ui`), and a function
// that closes the pool.
func openConsole(ctx context.Context, cfg config.Config, local console.Local, log zerolog.Logger) (*console.Handler, func(), error) {
	token, err := cfg.UIToken()
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("INBOXD_UI_TOKEN_FILE: %w", err)}
	}
	rules, err := rejectedRules(cfg)
	if err != nil {
		return nil, nil, err
	}
	db, err := openPool(ctx, cfg, "inboxd-console", consoleConns)
	if err != nil {
		return nil, nil, err
	}
	h, err := console.New(console.Config{DB: db, Token: token, ShowPayloads: cfg.UIShowPayloads,
		StaleAfter: cfg.StaleAfter, Local: local, Logger: log,
		// A rejected row is re-mapped by the rules `inboxd requeue
		// --status rejected` applies, with this process's mapping settings
		// and webhook sources.
		RequeueRejected: func(ctx context.Context, id int64, dryRun bool) (bool, error) {
			conn, err := db.Acquire(ctx)
			if err != nil {
				return false, err
			}
			defer conn.Release()
			outcome, _, err := requeueOneRejected(ctx, conn.Conn(), id, rules, dryRun, false)
			return outcome == outcomeRequeued, err
		}})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	if token == "" {
		log.Info().Str("component", "console").Msg("the console (/ui/) is read-only: INBOXD_UI_TOKEN_FILE is not set")
	}
	return h, db.Close, nil
}

// mountConsole adds the console to mux under /ui/.
func mountConsole(mux *http.ServeMux, h http.Handler) {
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
	h, closeDB, err := openConsole(ctx, cfg, nil, log)
	if err != nil {
		return err
	}
	defer closeDB()
	return serveConsole(ctx, ln, h, log)
}

// serveConsole serves h under /ui/ on ln (and redirects / there) until
// ctx ends.
func serveConsole(ctx context.Context, ln net.Listener, h http.Handler, log zerolog.Logger) error {
	mux := http.NewServeMux()
	mountConsole(mux, h)
	mux.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusSeeOther))
	srv, sln := newHTTPServer(ln, mux, defaultHTTPServerLimits())
	log.Info().Str("addr", ln.Addr().String()).Msg("serving the console under /ui/")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sln) }()
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

// openConsole's pool is a console.DB.
var _ console.DB = (*pgxpool.Pool)(nil)
