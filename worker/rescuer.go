package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// rescueBatch caps the rows one rescue statement returns.
const rescueBatch = 1000

// rescueLoop periodically returns rows with expired leases.
func (p *Pool) rescueLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.RescueInterval)
	defer t.Stop()
	for {
		if _, err := p.Rescue(ctx); err != nil && ctx.Err() == nil {
			p.metrics.dbErrors.WithLabelValues("rescue").Inc()
			p.log.Error().Err(err).Msg("rescue failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Rescue returns every row whose lease has expired to received (or dead,
// when its attempts are used up) and reports how many rows it moved. The
// pool calls it every RescueInterval; it is exported for tools and tests.
func (p *Pool) Rescue(ctx context.Context) (int, error) {
	total := 0
	for {
		qctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
		rows, err := p.db.Query(qctx, rescueSQL, pgx.NamedArgs{"limit": rescueBatch, "max_attempts": p.cfg.MaxAttempts})
		if err != nil {
			cancel()
			return total, fmt.Errorf("rescue expired leases: %w", err)
		}
		n := 0
		var (
			id                 int64
			eventID, eventType string
			status             string
			attempts           int
			started            bool
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &eventID, &eventType, &status, &attempts, &started}, func() error {
			n++
			p.metrics.rescued.WithLabelValues(status).Inc()
			msg := "rescued row with expired lease"
			if !started {
				msg = "rescued row whose lease expired before its handler started; the attempt is not counted"
			}
			p.log.Warn().Int64("row_id", id).Str("event_id", eventID).Str("event_type", eventType).
				Str("status", status).Int("attempts", attempts).Bool("started", started).Msg(msg)
			return nil
		})
		cancel()
		if err != nil {
			return total, fmt.Errorf("rescue expired leases: %w", err)
		}
		total += n
		if n > 0 {
			signal(p.wake)
		}
		if n < rescueBatch {
			return total, nil
		}
	}
}

// statsLoop refreshes the live-row gauges.
func (p *Pool) statsLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.StatsInterval)
	defer t.Stop()
	for {
		if err := p.refreshStats(ctx); err != nil && ctx.Err() == nil {
			p.metrics.dbErrors.WithLabelValues("stats").Inc()
			p.log.Warn().Err(err).Msg("refreshing inbox gauges failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Pool) refreshStats(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
	defer cancel()
	st, err := ReadStats(ctx, p.db, p.cfg.StaleAfter)
	if err != nil {
		return err
	}
	p.metrics.rows.WithLabelValues(statusReceived).Set(float64(st.Received))
	p.metrics.rows.WithLabelValues("processing").Set(float64(st.Processing))
	p.metrics.rows.WithLabelValues(statusDead).Set(float64(st.Dead))
	p.metrics.rows.WithLabelValues("rejected").Set(float64(st.Rejected))
	p.metrics.staleRows.Set(float64(st.Stale))
	p.metrics.oldestReceived.Set(st.OldestReceivedAge.Seconds())
	p.metrics.oldestReady.Set(st.OldestReadyAge.Seconds())
	return nil
}
