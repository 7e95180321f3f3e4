package maintenance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/clock"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/partitions"
	"github.com/inboxd/inboxd/worker"
)

// Retention deletes expired rows: processed rows after
// worker.RetentionConfig.Processed, dead and rejected rows after
// worker.RetentionConfig.Failed. Every
// replica may run one: batches are small, each its own short transaction,
// and taken with SKIP LOCKED so that replicas never fight over rows.
//
// A Retention is a service (internal/startstop): Start runs a pass at once
// and then every Interval, until Stop or the end of Start's context; a
// failed pass is logged and counted, and the next one tries again. It
// runs once. Prune runs one pass on demand.
type Retention struct {
	periodic
	cfg     worker.RetentionConfig
	db      *pgxpool.Pool
	log     zerolog.Logger
	metrics *retentionMetrics
	clock   *clock.Clock // nil: the system's
}

// PruneResult says what one retention pass deleted, or would delete.
type PruneResult struct {
	// Processed is the number of processed rows.
	Processed int64
	// Failed is the number of dead and rejected rows.
	Failed int64
}

// NewRetention returns a Retention on the inbox reachable through db.
// Metrics are registered on reg (nil: none).
func NewRetention(db *pgxpool.Pool, cfg worker.RetentionConfig, logger zerolog.Logger, reg prometheus.Registerer) (*Retention, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("retention config: %w", err)
	}
	if db == nil {
		return nil, errors.New("retention: nil database pool")
	}
	r := &Retention{
		cfg:     cfg,
		db:      db,
		log:     logger.With().Str("component", "retention").Logger(),
		metrics: newRetentionMetrics(reg),
	}
	r.periodic = periodic{interval: cfg.Interval, round: r.round}
	return r, nil
}

// round runs one pass, and logs and counts its outcome.
func (r *Retention) round(ctx context.Context) {
	start := r.clock.Now()
	res, err := r.Prune(ctx, false)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		r.metrics.errors.Inc()
		r.log.Error().Err(err).Int64("deleted_processed", res.Processed).Int64("deleted_failed", res.Failed).
			Msg("retention pass failed; the next one tries again")
	default:
		r.metrics.lastSuccess.SetToCurrentTime()
		r.metrics.duration.Observe(r.clock.Since(start).Seconds())
		if res.Processed+res.Failed > 0 {
			r.log.Info().Int64("deleted_processed", res.Processed).Int64("deleted_failed", res.Failed).
				Dur("took", r.clock.Since(start).Round(time.Millisecond)).Msg("retention pass")
		}
	}
}

// Prune runs one retention pass: it deletes expired rows batch by batch
// until none is left, and reports how many it deleted. With dryRun it
// deletes nothing and reports how many rows a pass would delete now.
func (r *Retention) Prune(ctx context.Context, dryRun bool) (PruneResult, error) {
	if dryRun {
		qctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
		defer cancel()
		e, err := driver.CountExpired(qctx, r.db, driver.ExpiredParams{
			Processed: r.cfg.Processed, Failed: r.cfg.Failed, BlockingTypes: r.blockingTypes(),
		})
		if err != nil {
			return PruneResult{}, err
		}
		return PruneResult{Processed: e.Processed, Failed: e.Failed}, nil
	}
	var res PruneResult
	// A partitioned inbox retires whole partitions: no DELETE of processed
	// rows (internal/partitions).
	round, partitioned, err := partitions.Maintain(ctx, r.db, "inbox", r.cfg.Processed, r.log)
	if err != nil {
		return res, err
	}
	if partitioned {
		if round.Switched > 0 || len(round.Retired) > 0 || round.Carried > 0 {
			r.log.Info().Int64("switched_to", round.Switched).Strs("retired", round.Retired).
				Int64("carried", round.Carried).Msg("inbox partitions maintained")
		}
	} else {
		n, err := r.deleteAll(ctx, "processed", func(ctx context.Context) (int64, error) {
			return driver.DeleteProcessed(ctx, r.db, r.cfg.Processed, r.cfg.Batch)
		})
		res.Processed = n
		if err != nil {
			return res, err
		}
	}
	if r.cfg.Failed == 0 {
		return res, err
	}
	blocking := r.blockingTypes()
	res.Failed, err = r.deleteAll(ctx, "failed", func(ctx context.Context) (int64, error) {
		return driver.DeleteFailed(ctx, r.db, r.cfg.Failed, r.cfg.Batch, blocking)
	})
	return res, err
}

// RegistryBlockingTypes returns the event types of reg's routes whose dead
// rows hold their key back (handlers.Policy.BlocksKey), for a Retention
// that runs without a pool (inboxd prune); a running pool's own follow its
// routes as they are (engine.Pool.BlockingTypes).
func RegistryBlockingTypes(reg *handlers.Registry) []string {
	out := []string{}
	for _, r := range reg.Routes() {
		if r.Policy.BlocksKey() {
			out = append(out, r.Type)
		}
	}
	return out
}

// blockingTypes is worker.RetentionConfig.BlockingTypes' answer, never nil.
func (r *Retention) blockingTypes() []string {
	if r.cfg.BlockingTypes == nil {
		return []string{}
	}
	return nonNil(r.cfg.BlockingTypes())
}

// deleteAll runs deleteBatch, which deletes one batch of the rows of
// label, batch after batch, pausing in between, until a batch comes back
// short.
func (r *Retention) deleteAll(ctx context.Context, label string, deleteBatch func(context.Context) (int64, error)) (int64, error) {
	var total int64
	for {
		qctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
		n, err := deleteBatch(qctx)
		cancel()
		if err != nil {
			return total, err
		}
		total += n
		r.metrics.deleted.WithLabelValues(label).Add(float64(n))
		if n < int64(r.cfg.Batch) {
			return total, nil
		}
		if !backoff.Sleep(ctx, r.cfg.Pause) {
			return total, ctx.Err()
		}
	}
}

// retentionMetrics are the retention's Prometheus metrics.
type retentionMetrics struct {
	deleted     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	duration    prometheus.Histogram
	errors      prometheus.Counter
}

func newRetentionMetrics(reg prometheus.Registerer) *retentionMetrics {
	m := &retentionMetrics{
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inboxd_retention_deleted_rows_total",
			Help: "Rows deleted by retention, by status group (processed; failed: dead and rejected).",
		}, []string{"status"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inboxd_retention_last_success_timestamp_seconds",
			Help: "When this replica's last retention pass succeeded (Unix time; 0 before the first).",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "inboxd_retention_run_duration_seconds",
			Help:    "How long successful retention passes took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_retention_errors_total",
			Help: "Retention passes that failed.",
		}),
	}
	for _, s := range []string{"processed", "failed"} {
		m.deleted.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(m.deleted, m.lastSuccess, m.duration, m.errors)
	}
	return m
}
