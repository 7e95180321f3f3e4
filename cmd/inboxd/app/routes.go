package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/handlers/riverjob"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/opfiles"
	"github.com/inboxd/inboxd/internal/opfiles/routesfile"
)

// registryBuilder builds the daemon's handler registry, at start and again
// on every SIGHUP.
type registryBuilder struct {
	cfg  config.Config
	opts Options
	// db is the engine pool, which river routes insert their jobs through.
	db  *pgxpool.Pool
	log zerolog.Logger
	// middleware is the daemon's own, around every handler (tracing).
	middleware []handlers.Middleware
}

// build combines the Go handlers from opts with the routes file.
// The caller's registry is never changed: the routes go on a copy, so the
// routes file can be loaded again on SIGHUP.
//
// River routes get a River job inserter on db (the engine pool; the jobs
// are inserted in each row's own transaction) once every one of them names
// a job River can take and River's schema is there. Whether it is there is
// asked with a read-only query; when the database cannot answer yet (the
// daemon may start before it), buildRegistry goes on with a warning, and an
// insert that finds River's tables missing says, in the row's last_error,
// to run `inboxd migrate --river`.
//
// The daemon's own middleware (tracing) goes on the copy too, around every
// handler and inside the caller's middleware.
func (b registryBuilder) build(ctx context.Context) (*handlers.Registry, error) {
	cfg, opts, db, log := b.cfg, b.opts, b.db, b.log
	reg := handlers.NewRegistry()
	if opts.Registry != nil {
		reg = opts.Registry.Clone()
	}
	reg.Use(b.middleware...)
	if cfg.Routes == "" {
		return reg, nil
	}
	routes, err := routesfile.Load(cfg.Routes)
	if err != nil {
		return nil, fmt.Errorf("INBOXD_ROUTES: %w", err)
	}
	ropts := handlers.RegisterOptions{MaxRetryAfter: cfg.BackoffMax}
	if routes.HasRiverRoutes() {
		if ropts.Jobs, err = riverInserter(ctx, cfg.Routes, routes, db, log); err != nil {
			return nil, fmt.Errorf("INBOXD_ROUTES: %w", err)
		}
	}
	if err := routes.Register(reg, ropts); err != nil {
		return nil, fmt.Errorf("INBOXD_ROUTES: %w", err)
	}
	return reg, nil
}

// riverSchemaCheckTimeout bounds the start-up check of River's schema, so a
// database that does not answer delays the start by this much at most.
const riverSchemaCheckTimeout = 5 * time.Second

// riverInserter checks the river routes of the routes file at path against
// River's rules and River's schema, and returns the inserter their jobs go
// through.
func riverInserter(ctx context.Context, path string, routes *handlers.Routes, db *pgxpool.Pool, log zerolog.Logger) (handlers.JobInserter, error) {
	var errs []error
	for i, rc := range routes.Routes {
		if rc.Handler != handlers.HandlerRiver {
			continue
		}
		err := riverjob.CheckJob(handlers.Job{Kind: rc.Kind, Queue: rc.Queue, Priority: rc.Priority, MaxAttempts: rc.MaxAttempts})
		if err == nil {
			continue
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			errs = append(errs, fmt.Errorf("%s: %s: %s", path, opfiles.RouteLabel(i+1, rc.Type), line))
		}
	}
	if len(errs) > 0 {
		return nil, opfiles.Join(path, errs)
	}
	cctx, cancel := context.WithTimeout(ctx, riverSchemaCheckTimeout)
	defer cancel()
	switch err := riverjob.CheckSchema(cctx, db); {
	case errors.Is(err, riverjob.ErrSchemaMissing):
		return nil, fmt.Errorf("river routes need River's tables: %w", err)
	case err != nil:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		_, reason := driver.ClassifyConnect(err)
		log.Warn().Str("error", reason).
			Msg("River's schema could not be checked yet; if it is missing, river routes fail until `inboxd migrate --river` has run")
	}
	ins, err := riverjob.New(db, riverjob.Config{})
	if err != nil {
		return nil, err
	}
	return ins, nil
}

// reloadRoutes loads the routes file again on every SIGHUP and hands the
// new registry to the engine (and to inForce, which the console reads). A file that does not load keeps the old routes,
// and the log says why.
func reloadRoutes(ctx context.Context, b registryBuilder, engine *inboxd.Inboxd, inForce *routesInForce) {
	log := b.log
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
		reg, err := b.build(ctx)
		if err != nil {
			log.Error().Err(err).Msg("SIGHUP: routes not reloaded, the old ones stay in force")
			continue
		}
		engine.SetRegistry(reg)
		inForce.set(reg)
		log.Info().Str("routes", b.cfg.Routes).Int("types", reg.Types()).Msg("SIGHUP: routes reloaded")
	}
}
