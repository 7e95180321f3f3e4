package maintenance

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/worker"
)

// controlsInterval is how often every replica reads the route controls:
// a pause, a resume, a rate change or a breaker reset takes effect on the
// whole fleet within about that.
const controlsInterval = 500 * time.Millisecond

// RouteControls is what the controls reader needs of the pool's routes.
type RouteControls interface {
	// SetControls applies the routes' controls as read (by driver route
	// names: event types, driver.DefaultRoute for the default route): the
	// routes in it paused are paused and every other route not, a rate
	// override replaces the route's own rate until it is gone, a breaker
	// reset newer than the last one seen closes the route's breaker. It
	// reports whether a route may claim more than before (resumed, a
	// breaker closed, a rate raised): then the claim loop is woken.
	SetControls(controls []driver.RouteControl) (wake bool)
}

// ControlsReader reads the route controls every controlsInterval and
// applies them to the pool's routes; a change that lets a route claim more
// wakes the claim loop. It is a service (periodic). A failed read keeps
// the routes as they were.
type ControlsReader struct {
	periodic
	db               *pgxpool.Pool
	routes           RouteControls
	wake             func()
	statementTimeout time.Duration
	log              zerolog.Logger
	metrics          *Metrics
}

// NewControlsReader returns a reader of the route controls on db for
// routes, that calls wake when a route may claim more.
func NewControlsReader(db *pgxpool.Pool, routes RouteControls, wake func(), cfg worker.Config, log zerolog.Logger, m *Metrics) *ControlsReader {
	r := &ControlsReader{db: db, routes: routes, wake: wake, statementTimeout: cfg.StatementTimeout, log: log, metrics: m}
	r.periodic = periodic{interval: controlsInterval, round: r.Round}
	return r
}

// Round reads the route controls once and applies them; a failure is
// logged and counted, and the routes stay as they were.
func (r *ControlsReader) Round(ctx context.Context) {
	if err := r.refresh(ctx); err != nil && ctx.Err() == nil {
		r.metrics.DBErrors.WithLabelValues("controls").Inc()
		r.log.Warn().Err(err).Msg("reading the route controls failed: routes stay as they were")
	}
}

// refresh reads the route controls and applies them.
func (r *ControlsReader) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.statementTimeout)
	defer cancel()
	list, err := driver.RouteControls(ctx, r.db)
	if err != nil {
		return err
	}
	if r.routes.SetControls(list) {
		r.wake()
	}
	return nil
}
