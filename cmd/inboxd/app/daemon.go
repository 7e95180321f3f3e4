package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
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
	"github.com/inboxd/inboxd/migrations"
	"github.com/inboxd/inboxd/worker"
)

// runDaemon runs ingest (when configured), the worker pool and the HTTP
// endpoints until ctx is cancelled or one of them fails.
func runDaemon(ctx context.Context, cfg config.Config, opts Options, stderr io.Writer, migrateFirst bool) error {
	log := newLogger(cfg, stderr)
	log.Info().Str("version", versionString()).Str("database", cfg.Redacted()).
		Bool("ingest", cfg.IngestEnabled()).Strs("topics", cfg.KafkaTopics).Str("group", cfg.KafkaGroup).
		Int("workers", cfg.Workers).Dur("lease", cfg.Lease).Int("max_attempts", cfg.MaxAttempts).
		Msg("starting")

	reg, err := buildRegistry(cfg, opts)
	if err != nil {
		return usageError{err}
	}
	if reg.Types() == 0 {
		log.Warn().Msg("no handlers or routes configured: every event will go to the default route")
	}

	poolCfg, err := cfg.PoolConfig("inboxd")
	if err != nil {
		return usageError{err}
	}
	db, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("database pool: %w", err)
	}
	defer db.Close()
	if err := waitForDatabase(ctx, db, log); err != nil {
		return nil // cancelled while waiting: a clean stop
	}
	if err := checkSchema(ctx, db, migrateFirst, log); err != nil {
		return err
	}

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	pool, err := worker.New(db, reg, worker.ConfigFrom(cfg), log, metrics)
	if err != nil {
		return usageError{err}
	}
	var consumer *ingest.Consumer
	if cfg.IngestEnabled() {
		consumer, err = ingest.New(ingest.ConfigFrom(cfg), db, log, metrics)
		if err != nil {
			return usageError{err}
		}
	}

	// Everything that can fail at start-up fails before any goroutine runs.
	var ln net.Listener
	if cfg.HTTPAddr != "" {
		if ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return usageError{fmt.Errorf("INBOXD_HTTP_ADDR: cannot listen on %s: %w", cfg.HTTPAddr, err)}
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	var started atomic.Bool
	g.Go(func() error {
		if err := pool.Run(gctx); err != nil {
			return fmt.Errorf("workers: %w", err)
		}
		return nil
	})
	if consumer != nil {
		g.Go(func() error {
			if err := consumer.Run(gctx); err != nil {
				return fmt.Errorf("ingest: %w", err)
			}
			return nil
		})
	}
	if ln != nil {
		h := &health{db: db, consumer: consumer, started: &started}
		srv := &http.Server{Handler: h.mux(metrics), ReadHeaderTimeout: 5 * time.Second}
		log.Info().Str("addr", ln.Addr().String()).Msg("serving /metrics, /healthz and /readyz")
		g.Go(func() error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http server: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(gctx), 5*time.Second)
			defer cancel()
			return srv.Shutdown(shutdownCtx)
		})
	}
	select {
	case <-pool.Ready():
		started.Store(true)
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

// buildRegistry combines the Go handlers from opts with the routes file.
func buildRegistry(cfg config.Config, opts Options) (*handlers.Registry, error) {
	reg := opts.Registry
	if reg == nil {
		reg = handlers.NewRegistry()
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

// waitForDatabase pings until the database answers or ctx is cancelled, so
// the daemon can start before its database.
func waitForDatabase(ctx context.Context, db *pgxpool.Pool, log zerolog.Logger) error {
	delay := 250 * time.Millisecond
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
		log.Warn().Err(err).Dur("retry_in", delay).Msg("database not reachable yet")
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(delay*2, 10*time.Second)
	}
}

// checkSchema refuses to run on a schema older than this binary's, unless
// asked to migrate first.
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
		log.Info().Int32("from", res.From).Int32("to", res.To).Msg("schema migrated")
		return nil
	}
	current, latest, err := migrations.Status(ctx, conn.Conn())
	if err != nil {
		return err
	}
	if current < latest {
		return fmt.Errorf("database schema is at version %d, this inboxd needs %d: run `inboxd migrate` first (or `inboxd run --migrate`)", current, latest)
	}
	return nil
}

// runMigrate applies pending migrations.
func runMigrate(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	conn, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := migrations.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	if res.From == res.To {
		fmt.Fprintf(stdout, "schema is up to date at version %d\n", res.To)
	} else {
		fmt.Fprintf(stdout, "schema migrated from version %d to %d\n", res.From, res.To)
	}
	return nil
}

// connect opens a single connection with the daemon's session settings.
func connect(ctx context.Context, cfg config.Config) (*pgx.Conn, error) {
	pc, err := cfg.PoolConfig("inboxd-cli")
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
