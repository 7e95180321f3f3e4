package maintenance

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/worker"
)

// controlsInterval is how often every replica reads the paused routes:
// a pause or a resume takes effect on the whole fleet within about that.
const controlsInterval = 500 * time.Millisecond

// PausedRoutes is what the controls reader needs of the pool's routes.
type PausedRoutes interface {
	// SetPaused marks the routes named in paused (driver route names:
	// event types, driver.DefaultRoute for the default route) paused and
	// every other route not; it reports whether a route was resumed.
	SetPaused(paused map[string]bool) (resumed bool)
}

// ControlsReader reads the paused routes every controlsInterval and
// applies them to the pool's routes; a resume wakes the claim loop. It is
// a service (periodic). A failed read keeps the routes as they were.
type ControlsReader struct {
	periodic
	db               *pgxpool.Pool
	routes           PausedRoutes
	wake             func()
	statementTimeout time.Duration
	log              zerolog.Logger
	metrics          *Metrics
}

// NewControlsReader returns a reader of the paused routes on db for
// routes, that calls wake when a route was resumed.
func NewControlsReader(db *pgxpool.Pool, routes PausedRoutes, wake func(), cfg worker.Config, log zerolog.Logger, m *Metrics) *ControlsReader {
	r := &ControlsReader{db: db, routes: routes, wake: wake, statementTimeout: cfg.StatementTimeout, log: log, metrics: m}
	r.periodic = periodic{interval: controlsInterval, round: r.Round}
	return r
}

// Round reads the paused routes once and applies them; a failure is
// logged and counted, and the routes stay as they were.
func (r *ControlsReader) Round(ctx context.Context) {
	if err := r.refresh(ctx); err != nil && ctx.Err() == nil {
		r.metrics.DBErrors.WithLabelValues("controls").Inc()
		r.log.Warn().Err(err).Msg("reading the paused routes failed: routes stay as they were")
	}
}

// refresh reads the paused routes and applies them.
func (r *ControlsReader) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.statementTimeout)
	defer cancel()
	list, err := driver.PausedRoutes(ctx, r.db)
	if err != nil {
		return err
	}
	paused := make(map[string]bool, len(list))
	for _, pr := range list {
		paused[pr.Route] = true
	}
	if r.routes.SetPaused(paused) {
		r.wake()
	}
	return nil
}
