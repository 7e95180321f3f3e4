package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// Stats are the inbox's live figures, as the gauges and `inboxd stats`
// show them (driver.Stats: read through the partial indexes on the live
// statuses only, never by counting processed rows).
type Stats = driver.Stats

// ReadStats reads the inbox's live figures from db in one statement;
// received rows older than staleAfter are stale.
func ReadStats(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, staleAfter time.Duration) (Stats, error) {
	return driver.ReadStats(ctx, db, staleAfter)
}

// statsRefresher refreshes the live-row gauges (ReadStats, and the keys
// held back by dead rows) every StatsInterval. It is a service (periodic).
type statsRefresher struct {
	periodic
	db               *pgxpool.Pool
	routes           orderedRoutes
	staleAfter       time.Duration
	statementTimeout time.Duration
	log              zerolog.Logger
	metrics          *metrics
}

// newStatsRefresher returns a stats refresher of the inbox on db, after
// cfg (StatsInterval, StaleAfter, StatementTimeout) and routes.
func newStatsRefresher(db *pgxpool.Pool, routes orderedRoutes, cfg Config, log zerolog.Logger, m *metrics) *statsRefresher {
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
		s.metrics.dbErrors.WithLabelValues("stats").Inc()
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
	m.rows.WithLabelValues(string(status.Received)).Set(float64(st.Received))
	m.rows.WithLabelValues(string(status.Processing)).Set(float64(st.Processing))
	m.rows.WithLabelValues(string(status.Dead)).Set(float64(st.Dead))
	m.rows.WithLabelValues(string(status.Rejected)).Set(float64(st.Rejected))
	m.staleRows.Set(float64(st.Stale))
	m.oldestReceived.Set(st.OldestReceivedAge.Seconds())
	m.oldestReady.Set(st.OldestReadyAge.Seconds())
	if _, blocking := s.routes.orderedTypes(); len(blocking) > 0 {
		n, err := driver.BlockedKeys(ctx, s.db, blocking)
		if err != nil {
			return err
		}
		m.blockedKeys.Set(float64(n))
	} else {
		m.blockedKeys.Set(0)
	}
	return nil
}
