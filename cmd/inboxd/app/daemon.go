package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/console"
	"github.com/inboxd/inboxd/internal/httpserve"
	"github.com/inboxd/inboxd/worker"
)

// runDaemon runs ingest (when configured), the worker pool, retention and
// the HTTP endpoints until ctx is cancelled or one of them fails.
//
// The HTTP endpoints come up first, before the database is reached: the
// liveness probe never depends on the database, and readiness says
// "starting" until the workers run. Under systemd (Type=notify) READY=1
// follows once the database, and Kafka when configured, answer.
func runDaemon(ctx context.Context, cfg config.Config, opts Options, stderr io.Writer, migrateFirst bool) error {
	log := newLogger(cfg, stderr)
	if opts.Logger != nil {
		log = *opts.Logger
	}
	defer captureStdlog(log, stderr)()
	logStarting(log, cfg)
	engineConns, txConns := cfg.PoolSizes()

	// Everything that can fail at start-up fails before any goroutine runs.
	var err error
	var ln net.Listener
	if cfg.HTTPAddr != "" && opts.Mux == nil {
		if ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return usageError{fmt.Errorf("INBOXD_HTTP_ADDR: cannot listen on %s: %w", cfg.HTTPAddr, err)}
		}
		defer ln.Close()
	}
	// Pools connect lazily: creating them does not reach the database.
	db, txdb := opts.DB, opts.TxDB
	if db == nil {
		if db, err = openPool(ctx, cfg, "inboxd", engineConns); err != nil {
			return err
		}
		defer db.Close()
	}
	if txdb == nil {
		if txdb, err = openPool(ctx, cfg, "inboxd-handlers", txConns); err != nil {
			return err
		}
		defer txdb.Close()
	}

	tracer, stopTracing, err := startTracing(ctx, cfg, log)
	if err != nil {
		return usageError{err}
	}
	defer stopTracing()
	builder := registryBuilder{cfg: cfg, opts: opts, db: db, log: log, middleware: []handlers.Middleware{tracer}}
	reg, err := builder.build(ctx)
	if err != nil {
		return usageError{err}
	}
	inForce := &routesInForce{}
	inForce.set(reg)
	publishOnly := cfg.Outbox && len(sourcesOf(cfg)) == 0
	if cfg.Routes == "" && reg.Types() == 0 && publishOnly {
		log.Warn().Msg("no routes and no source: this replica relays the outbox; rows written to the inbox table would go dead")
	} else if cfg.Routes == "" && reg.Types() == 0 {
		return usageError{errors.New("no routes file (INBOXD_ROUTES) and no handlers registered: every event would be " +
			"dead-lettered; set INBOXD_ROUTES (a file with just `default: ignore` is enough to drain the inbox)")}
	}
	if reg.Types() == 0 && !(publishOnly && cfg.Routes == "") {
		log.Warn().Str("routes", cfg.Routes).Msg("the routes file routes no event type: every event goes to its default")
	}

	var metricsReg prometheus.Registerer
	gather := prometheus.Gatherer(nil)
	if opts.Registerer != nil {
		metricsReg = opts.Registerer
		gather, _ = opts.Registerer.(prometheus.Gatherer)
	} else {
		own := prometheus.NewRegistry()
		own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		metricsReg, gather = own, own
	}
	if err := metricsReg.Register(buildInfo()); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	sources, err := sourcesToRun(cfg)
	if err != nil {
		return usageError{err}
	}
	ib, err := inboxd.New(inboxd.Config{
		Registry:   reg,
		DB:         db,
		TxDB:       txdb,
		Logger:     log,
		Registerer: metricsReg,
		Worker:     workerConfig(cfg),
		Retention:  retentionConfig(cfg),
		Sources:    sources,
		NoHandOff:  !cfg.IngestHandOff,
		Outbox:     outboxConfig(cfg),
		Migrate:    migrateFirst,
	})
	if err != nil {
		return usageError{err}
	}

	h := &health{engine: ib}
	var ui http.Handler
	if opts.Mux != nil || ln != nil {
		var addr net.Addr // an embedder's mux: not known
		if ln != nil {
			addr = ln.Addr()
		}
		c, closeConsole, err := openConsole(ctx, cfg, console.GathererLocal(gather), inForce, addr, log)
		if err != nil {
			return err
		}
		defer closeConsole()
		ui = c
	}
	var srv *httpserve.Server
	serveDone := make(chan error, 1)
	switch {
	case opts.Mux != nil:
		h.register(opts.Mux, gather)
		mountConsole(opts.Mux, ui)
	case ln != nil:
		mux := http.NewServeMux()
		h.register(mux, gather)
		mountConsole(mux, ui)
		srv = httpserve.New(mux, defaultHTTPServerLimits(), log.With().Str("component", "http").Logger())
		log.Info().Str("addr", ln.Addr().String()).Msg("serving /metrics, /healthz, /readyz and the console under /ui/")
		go func() { serveDone <- srv.Serve(ln) }()
		defer func() {
			// Bounded like the rest of the shutdown: a scrape in progress may
			// finish, nothing may hold the exit.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 250*time.Millisecond)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}

	if err := waitForDatabase(ctx, db, log); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting: a clean stop
		}
		return err
	}

	notify := systemdNotifier{log: log}
	defer exitIfStuck(ctx, cfg, log)()
	g, gctx := errgroup.WithContext(ctx)
	// Run checks the schema (migrating it first with --migrate), then runs
	// ingest, the workers and retention.
	g.Go(func() error { return ib.Run(gctx) })
	if srv != nil {
		g.Go(func() error {
			select {
			case err := <-serveDone:
				if err != nil && !errors.Is(err, http.ErrServerClosed) {
					return fmt.Errorf("http server: %w", err)
				}
			case <-gctx.Done():
			}
			return nil
		})
	}
	g.Go(func() error { reloadRoutes(gctx, builder, ib, inForce); return nil })
	g.Go(func() error {
		// The watchdog is fed while the claim loop goes round (a loop stuck
		// longer than any of its bounded waits is stuck for good) and ingest
		// is not stalled on a known backlog.
		stuckAfter := cfg.StatementTimeout + cfg.PollInterval + 10*time.Second
		notify.watchdog(gctx, func(now time.Time) error {
			if last := ib.Progress(); !last.IsZero() && now.Sub(last) > stuckAfter {
				return fmt.Errorf("the claim loop has not gone round for %s", now.Sub(last).Round(time.Second))
			}
			if err := ib.Healthy(); err != nil {
				return fmt.Errorf("ingest: %w", err)
			}
			return nil
		})
		return nil
	})
	g.Go(func() error {
		select {
		case <-ib.Running():
		case <-gctx.Done():
			return nil
		}
		notify.ready("running")
		<-gctx.Done()
		notify.stopping()
		return nil
	})
	// An error is logged by Main, as every error of a daemon command is.
	if err = g.Wait(); err != nil {
		return err
	}
	log.Info().Msg("stopped")
	return nil
}

// exitIfStuck is the shutdown's last resort: once ctx is cancelled, the
// workers stop within INBOXD_SHUTDOWN_TIMEOUT + worker.ShutdownMargin -
// worker.ShutdownReserve whatever the database does, and ingest and the
// HTTP server sooner; should the daemon still not have returned when
// INBOXD_SHUTDOWN_TIMEOUT + worker.ShutdownMargin is up (a bug, a library
// that ignores its context), the process exits with status 1 then, so that
// the documented bound holds. Rows still held return to other workers when
// their leases expire. Call the returned function when the daemon returns,
// to disarm it.
func exitIfStuck(ctx context.Context, cfg config.Config, log zerolog.Logger) (disarm func()) {
	returned := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-returned:
			return
		}
		t := time.NewTimer(cfg.ShutdownTimeout + worker.ShutdownMargin - 50*time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			log.Error().Msg("shutdown overran its bound; exiting now")
			os.Exit(ExitFailure)
		case <-returned:
		}
	}()
	return func() { close(returned) }
}

// openPool opens a pool of maxConns connections on INBOXD_DATABASE_URL with
// the daemon's session settings. It does not connect yet.
func openPool(ctx context.Context, cfg config.Config, name string, maxConns int) (*pgxpool.Pool, error) {
	pc, err := cfg.PoolConfig(name, maxConns)
	if err != nil {
		return nil, usageError{err}
	}
	db, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database pool: %w", err)
	}
	return db, nil
}

// buildInfo is the inboxd_build_info gauge: 1, labelled with the version
// and the Go version the binary was built with.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "inboxd_build_info",
		Help: "Always 1; its labels say which inboxd runs.",
	}, []string{"version", "goversion"})
	g.WithLabelValues(versionString(), runtime.Version()).Set(1)
	return g
}
