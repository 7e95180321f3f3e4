package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/migrations"
	"github.com/inboxd/inboxd/worker"
)

// runDaemon runs ingest (when configured), the worker pool and the HTTP
// endpoints until ctx is cancelled or one of them fails.
//
// The HTTP endpoints come up first, before the database is reached: the
// liveness probe never depends on the database, and readiness says
// "starting" until the workers run.
func runDaemon(ctx context.Context, cfg config.Config, opts Options, stderr io.Writer, migrateFirst bool) error {
	log := newLogger(cfg, stderr)
	engineConns, txConns := cfg.PoolSizes()
	log.Info().Str("version", versionString()).Str("database", cfg.Redacted()).
		Bool("ingest", cfg.IngestEnabled()).Strs("topics", cfg.KafkaTopics).Str("group", cfg.KafkaGroup).
		Int("workers", cfg.Workers).Dur("lease", cfg.Lease).Int("max_attempts", cfg.MaxAttempts).
		Int("engine_conns", engineConns).Int("tx_conns", txConns).
		Msg("starting")

	reg, err := buildRegistry(cfg, opts)
	if err != nil {
		return usageError{err}
	}
	if reg.Types() == 0 {
		log.Warn().Msg("no handlers or routes configured: every event will go to the default route")
	}

	// Everything that can fail at start-up fails before any goroutine runs.
	engineCfg, err := cfg.PoolConfig("inboxd", engineConns)
	if err != nil {
		return usageError{err}
	}
	txCfg, err := cfg.PoolConfig("inboxd-handlers", txConns)
	if err != nil {
		return usageError{err}
	}
	var ln net.Listener
	if cfg.HTTPAddr != "" {
		if ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return usageError{fmt.Errorf("INBOXD_HTTP_ADDR: cannot listen on %s: %w", cfg.HTTPAddr, err)}
		}
	}
	// The pools connect lazily: creating them does not reach the database.
	db, err := pgxpool.NewWithConfig(ctx, engineCfg)
	if err != nil {
		return fmt.Errorf("database pool: %w", err)
	}
	defer db.Close()
	txdb, err := pgxpool.NewWithConfig(ctx, txCfg)
	if err != nil {
		return fmt.Errorf("database pool: %w", err)
	}
	defer txdb.Close()

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo())
	wcfg := workerConfig(cfg)
	wcfg.TxDB = txdb
	pool, err := worker.New(db, reg, wcfg, log, metrics)
	if err != nil {
		return usageError{err}
	}
	retention, err := worker.NewRetention(db, retentionConfig(cfg), log, metrics)
	if err != nil {
		return usageError{err}
	}
	var consumer *ingest.Consumer
	if cfg.IngestEnabled() {
		consumer, err = ingest.New(ingestConfig(cfg), db, log, metrics)
		if err != nil {
			return usageError{err}
		}
	}

	h := &health{db: db, consumer: consumer}
	var srv *http.Server
	serveDone := make(chan error, 1)
	if ln != nil {
		srv = &http.Server{Handler: h.mux(metrics), ReadHeaderTimeout: 5 * time.Second}
		log.Info().Str("addr", ln.Addr().String()).Msg("serving /metrics, /healthz and /readyz")
		go func() { serveDone <- srv.Serve(ln) }()
		defer func() {
			// Bounded like the rest of the shutdown: a scrape in progress may
			// finish, nothing may hold the exit.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
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
	if err := checkSchema(ctx, db, migrateFirst, log); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := pool.Run(gctx); err != nil {
			return fmt.Errorf("workers: %w", err)
		}
		return nil
	})
	g.Go(func() error { return retention.Run(gctx) })
	if consumer != nil {
		g.Go(func() error {
			if err := consumer.Run(gctx); err != nil {
				return fmt.Errorf("ingest: %w", err)
			}
			return nil
		})
	}
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
	g.Go(func() error { reloadRoutes(gctx, cfg, opts, pool, log); return nil })
	select {
	case <-pool.Ready():
		h.started.Store(true)
		log.Info().Msg("running")
	case <-gctx.Done():
	}
	err = g.Wait()
	if err != nil {
		log.Error().Err(err).Msg("stopped with an error")
		return err
	}
	log.Info().Msg("stopped")
	return nil
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

// buildRegistry combines the Go handlers from opts with the routes file.
// The caller's registry is never changed: the routes go on a copy, so the
// routes file can be loaded again on SIGHUP.
func buildRegistry(cfg config.Config, opts Options) (*handlers.Registry, error) {
	reg := handlers.NewRegistry()
	if opts.Registry != nil {
		reg = opts.Registry.Clone()
	}
	if cfg.Routes == "" {
		return reg, nil
	}
	routes, err := handlers.LoadRoutes(cfg.Routes)
	if err != nil {
		return nil, fmt.Errorf("INBOXD_ROUTES: %w", err)
	}
	if err := routes.Register(reg, handlers.RouteOptions{MaxRetryAfter: cfg.BackoffMax}); err != nil {
		return nil, fmt.Errorf("INBOXD_ROUTES: %w", err)
	}
	return reg, nil
}

// reloadRoutes loads the routes file again on every SIGHUP and hands the
// new registry to the pool. A file that does not load keeps the old routes,
// and the log says why.
func reloadRoutes(ctx context.Context, cfg config.Config, opts Options, pool *worker.Pool, log zerolog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer func() {
		// Stop alone would give SIGHUP back its default action, which
		// kills the process, in the middle of the shutdown.
		signal.Stop(hup)
		signal.Ignore(syscall.SIGHUP)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		reg, err := buildRegistry(cfg, opts)
		if err != nil {
			log.Error().Err(err).Msg("SIGHUP: routes not reloaded, the old ones stay in force")
			continue
		}
		pool.SetRegistry(reg)
		log.Info().Str("routes", cfg.Routes).Int("types", reg.Types()).Msg("SIGHUP: routes reloaded")
	}
}

// permanentStartupGrace is how long a permanent connection error (a
// database or role that does not exist, a refused password) is retried at
// start-up before run gives up naming it: long enough for an init job
// creating the database, short enough for a crash loop to show the cause.
const permanentStartupGrace = 10 * time.Second

// waitForDatabase pings until the database answers or ctx is cancelled, so
// the daemon can start before its database. Transient failures (connection
// refused, timeouts) are retried for as long as it takes; a permanent one
// is retried for permanentStartupGrace and then returned, named as it is.
func waitForDatabase(ctx context.Context, db *pgxpool.Pool, log zerolog.Logger) error {
	retry := backoff.NewRetrier(backoff.Exponential{Base: 250 * time.Millisecond, Max: 10 * time.Second})
	var permanentSince time.Time
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := db.Ping(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		permanent, reason := classifyConnectError(err)
		switch {
		case !permanent:
			permanentSince = time.Time{}
		case permanentSince.IsZero():
			permanentSince = time.Now()
		case time.Since(permanentSince) >= permanentStartupGrace:
			return fmt.Errorf("database: %s (giving up after %s: retrying cannot fix this)", reason, permanentStartupGrace)
		}
		delay := retry.Failed()
		msg := "database not reachable yet"
		if permanent {
			msg = "database refuses the connection"
		}
		log.Warn().Str("error", reason).Bool("permanent", permanent).Dur("retry_in", delay).Msg(msg)
		if !backoff.Sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}

// checkSchema refuses to run on a schema older than this binary's (unless
// asked to migrate first) or on a newer one that is not compatible with it;
// on a newer, compatible one (after a rollback) it warns and goes on. Unless
// asked to migrate, it only reads.
func checkSchema(ctx context.Context, db *pgxpool.Pool, migrateFirst bool, log zerolog.Logger) error {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer conn.Release()
	if migrateFirst {
		res, err := migrations.Migrate(ctx, conn.Conn())
		if err != nil {
			return err
		}
		if res.Ahead {
			log.Warn().Int32("schema", res.From).Msg("schema is newer than this inboxd and compatible with it: nothing migrated")
			return nil
		}
		log.Info().Int32("from", res.From).Int32("to", res.To).Msg("schema migrated")
		return nil
	}
	st, err := migrations.Inspect(ctx, conn)
	if err != nil {
		return err
	}
	if err := st.Err(); err != nil {
		return err
	}
	if st.Ahead() {
		log.Warn().Int32("schema", st.Current).Int32("binary_schema", st.Latest).Int32("oldest_compatible", st.OldestCompatible).
			Msg("schema is newer than this inboxd and compatible with it (a rollback?): running")
	}
	return nil
}

// runMigrate applies pending migrations.
func runMigrate(ctx context.Context, cfg config.Config, stdout, stderr io.Writer) error {
	conn, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := migrations.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	switch {
	case res.Ahead:
		_, latest, _ := migrations.Status(ctx, conn)
		fmt.Fprintf(stderr, "inboxd: warning: the schema is at version %d, newer than this inboxd's %d, and compatible with it: nothing to migrate\n", res.To, latest)
	case res.From == res.To:
		fmt.Fprintf(stdout, "schema is up to date at version %d\n", res.To)
	default:
		fmt.Fprintf(stdout, "schema migrated from version %d to %d\n", res.From, res.To)
	}
	return nil
}

// connect opens a single connection with the daemon's session settings.
func connect(ctx context.Context, cfg config.Config) (*pgx.Conn, error) {
	pc, err := cfg.PoolConfig("inboxd-cli", 1)
	if err != nil {
		return nil, usageError{err}
	}
	conn, err := pgx.ConnectConfig(ctx, pc.ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.Redacted(), err)
	}
	return conn, nil
}

func newLogger(cfg config.Config, w io.Writer) zerolog.Logger {
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		level = zerolog.InfoLevel
	}
	if cfg.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	host, _ := os.Hostname()
	return zerolog.New(w).Level(level).With().Timestamp().Str("host", host).Logger()
}
