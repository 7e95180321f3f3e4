package maintenance

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/worker"
)

// unparkEvery is how many sweeper rounds pass between two unpark sweeps
// (round 0 unparks).
const unparkEvery = 10

// Sweeper is the safety net behind the hot path, every RescueInterval: it
// deletes the start bits of claims no worker holds any more
// (sql/starts_orphans.sql), and every unparkEvery rounds unparks the
// parked rows of ordered routes that wait for nothing any more
// (sql/unpark.sql; completions unpark their successors themselves). It is
// a service (periodic).
type Sweeper struct {
	periodic
	db               *pgxpool.Pool
	routes           OrderedRoutes
	wake             func() // rows may be due: the claim loop looks
	lease            time.Duration
	statementTimeout time.Duration
	log              zerolog.Logger
	metrics          *Metrics
	rounds           int // rounds begun; used by the loop alone
}

// newSweeper returns a sweeper of the rows on db, after cfg
// (RescueInterval, Lease, StatementTimeout) and routes, that calls wake
// when it unparked rows.
func newSweeper(db *pgxpool.Pool, routes OrderedRoutes, wake func(), cfg worker.Config, log zerolog.Logger, m *Metrics) *Sweeper {
	s := &Sweeper{
		db: db, routes: routes, wake: wake,
		lease: cfg.Lease, statementTimeout: cfg.StatementTimeout,
		log: log, metrics: m,
	}
	s.periodic = periodic{interval: cfg.RescueInterval, round: s.round}
	return s
}

// round deletes orphaned start bits and, every unparkEvery rounds,
// unparks; it reports failures.
func (s *Sweeper) round(ctx context.Context) {
	if err := s.DropOrphanStarts(ctx); err != nil && ctx.Err() == nil {
		s.metrics.DBErrors.WithLabelValues("rescue").Inc()
		s.log.Error().Err(err).Msg("deleting orphaned start bits failed")
	}
	if s.rounds%unparkEvery == 0 {
		if n, err := s.Unpark(ctx); err != nil && ctx.Err() == nil {
			s.metrics.DBErrors.WithLabelValues("rescue").Inc()
			s.log.Error().Err(err).Msg("unparking ordered rows failed")
		} else if n > 0 {
			s.log.Info().Int("rows", n).Msg("unparked ordered rows that waited for nothing")
		}
	}
	s.rounds++
}

// DropOrphanStarts deletes the start bits of claims no worker holds any
// more, not written for a lease (sql/starts_orphans.sql): those of workers
// that died, once their rows were rescued (a live worker deletes its own).
func (s *Sweeper) DropOrphanStarts(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, s.statementTimeout)
	defer cancel()
	_, err := driver.DeleteOrphanStarts(qctx, s.db, s.lease)
	return err
}

// Unpark releases parked rows of ordered routes that wait for nothing any
// more (see sql/unpark.sql), batch by batch, and reports how many.
func (s *Sweeper) Unpark(ctx context.Context) (int, error) {
	ordered, blocking := s.routes.OrderedTypes()
	total := 0
	for {
		qctx, cancel := context.WithTimeout(ctx, s.statementTimeout)
		n, err := driver.Unpark(qctx, s.db, driver.UnparkParams{
			Limit: rescueBatch, OrderedTypes: ordered, BlockingTypes: blocking,
		})
		cancel()
		if err != nil {
			return total, err
		}
		total += n
		if n > 0 {
			s.wake()
		}
		if n < rescueBatch {
			return total, nil
		}
	}
}
