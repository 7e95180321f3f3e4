package maintenance

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/worker"
)

// statsRefresher refreshes the live-row gauges (driver.ReadStats, and the keys
// held back by dead rows) every StatsInterval. It is a service (periodic).
type statsRefresher struct {
	periodic
	db               *pgxpool.Pool
	routes           OrderedRoutes
	staleAfter       time.Duration
	statementTimeout time.Duration
	log              zerolog.Logger
	metrics          *Metrics
}

// newStatsRefresher returns a stats refresher of the inbox on db, after
// cfg (StatsInterval, StaleAfter, StatementTimeout) and routes.
func newStatsRefresher(db *pgxpool.Pool, routes OrderedRoutes, cfg worker.Config, log zerolog.Logger, m *Metrics) *statsRefresher {
	s := &statsRefresher{
		db: db, routes: routes, staleAfter: cfg.StaleAfter, statementTimeout: cfg.StatementTimeout,
		log: log, metrics: m,
	}
	s.periodic = periodic{interval: cfg.StatsInterval, round: s.round}
	return s
}

// round refreshes the gauges, and reports a failure.
func (s *statsRefresher) round(ctx context.Context) {
	if err := s.refresh(ctx); err != nil && ctx.Err() == nil {
		s.metrics.DBErrors.WithLabelValues("stats").Inc()
		s.log.Warn().Err(err).Msg("refreshing inbox gauges failed")
	}
}

// refresh reads the figures and sets the gauges.
func (s *statsRefresher) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.statementTimeout)
	defer cancel()
	st, err := driver.ReadStats(ctx, s.db, s.staleAfter)
	if err != nil {
		return err
	}
	m := s.metrics
	m.Rows.WithLabelValues(string(status.Received)).Set(float64(st.Received))
	m.Rows.WithLabelValues(string(status.Processing)).Set(float64(st.Processing))
	m.Rows.WithLabelValues(string(status.Dead)).Set(float64(st.Dead))
	m.Rows.WithLabelValues(string(status.Rejected)).Set(float64(st.Rejected))
	m.StaleRows.Set(float64(st.Stale))
	m.OldestReceived.Set(st.OldestReceivedAge.Seconds())
	m.OldestReady.Set(st.OldestReadyAge.Seconds())
	if _, blocking := s.routes.OrderedTypes(); len(blocking) > 0 {
		n, err := driver.BlockedKeys(ctx, s.db, blocking)
		if err != nil {
			return err
		}
		m.BlockedKeys.Set(float64(n))
	} else {
		m.BlockedKeys.Set(0)
	}
	return nil
}
