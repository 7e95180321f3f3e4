package app

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/worker"
)

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
	if err := routes.Register(reg, handlers.RegisterOptions{MaxRetryAfter: cfg.BackoffMax}); err != nil {
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
