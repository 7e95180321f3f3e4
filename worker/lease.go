package worker

import (
	"context"
	"fmt"
	"time"
)

// renewLoop extends the leases of rows whose handlers have run for more than
// a third of the lease, and cancels handlers whose rows were fenced.
func (p *Pool) renewLoop(ctx context.Context) {
	t := time.NewTicker(max(p.cfg.Lease/6, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := p.renew(ctx); err != nil && ctx.Err() == nil {
				p.metrics.dbErrors.WithLabelValues("renew").Inc()
				p.log.Error().Err(err).Msg("lease renewal failed")
			}
		}
	}
}

// renew renews every lease with less than two thirds of its time left.
func (p *Pool) renew(ctx context.Context) error {
	now := p.cfg.Now()
	threshold := now.Add(p.cfg.Lease * 2 / 3)
	var due []*job
	p.mu.Lock()
	for _, j := range p.inflight {
		if j.leaseUntil.Before(threshold) {
			due = append(due, j)
		}
	}
	p.mu.Unlock()
	if len(due) == 0 {
		return nil
	}
	ids := make([]int64, len(due))
	tokens := make([]int64, len(due))
	for i, j := range due {
		ids[i], tokens[i] = j.row.ID, j.token
	}
	ctx, cancel := context.WithTimeout(ctx, max(p.cfg.Lease/3, time.Second))
	defer cancel()
	rows, err := p.db.Query(ctx, renewSQL, ids, tokens, p.cfg.Lease.Milliseconds())
	if err != nil {
		return fmt.Errorf("renew leases: %w", err)
	}
	renewed := make(map[int64]bool, len(due))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("renew leases: %w", err)
		}
		renewed[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("renew leases: %w", err)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	for _, j := range due {
		if cur, ok := p.inflight[j.row.ID]; !ok || cur != j {
			continue // finished meanwhile; its completion is fenced on its own
		}
		if renewed[j.row.ID] {
			j.leaseUntil = now.Add(p.cfg.Lease)
			p.metrics.renewals.Inc()
			continue
		}
		p.metrics.leaseLost.Inc()
		p.log.Warn().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
			Msg("lease lost: cancelling handler")
		j.cancel(errLeaseLost)
	}
	return nil
}
