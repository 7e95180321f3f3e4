package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// maxCompleteBatch caps the rows written by one completion statement.
const maxCompleteBatch = 1000

// numCompleters is how many completion statements may run at once: while
// one waits on its commit, the next batch gathers and goes.
const numCompleters = 2

// completeLinger is how long a batch of outcomes stays open for more to
// join it after its first one arrived. Every statement has a fixed cost (a
// round trip, a commit); with fast handlers outcomes arrive one claim's
// worth at a time, and waiting a few milliseconds lets one statement write
// several claims' worth. A row's final state is written at most this much
// later; its handler's slot is already free, so claiming does not wait.
const completeLinger = 5 * time.Millisecond

// completeLoop writes handler outcomes in batches until the results channel
// is closed and drained. ctx carries values only: final states are written
// even after shutdown began.
func (p *Pool) completeLoop(ctx context.Context) {
	batch := make([]result, 0, maxCompleteBatch)
	linger := time.NewTimer(completeLinger)
	linger.Stop()
	for first := range p.results {
		batch = append(batch[:0], first)
		linger.Reset(completeLinger)
	gather:
		for len(batch) < maxCompleteBatch {
			select {
			case r, ok := <-p.results:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			case <-linger.C:
				break gather
			}
		}
		linger.Stop()
		p.flush(ctx, batch)
	}
}

// flush writes one batch, retrying on database errors with backoff. It gives
// up after about a minute: the rows keep their leases, which expire, and the
// rescuer returns them (at-least-once, never lost).
func (p *Pool) flush(ctx context.Context, batch []result) {
	n := len(batch)
	ids := make([]int64, n)
	tokens := make([]int64, n)
	statuses := make([]string, n)
	delays := make([]int64, n)
	errs := make([]*string, n)
	deltas := make([]int32, n)
	released := false
	for i, r := range batch {
		ids[i], tokens[i], statuses[i], delays[i], errs[i] = r.id, r.token, r.status, r.delay.Milliseconds(), r.lastError
		if r.release {
			deltas[i] = -1
			released = true
		}
	}

	delay := 50 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	var applied map[int64]bool
	for {
		var err error
		applied, err = p.writeOutcomes(ctx, ids, tokens, statuses, delays, errs, deltas, released)
		if err == nil {
			break
		}
		p.metrics.dbErrors.WithLabelValues("complete").Inc()
		if time.Now().After(deadline) {
			p.log.Error().Err(err).Int("rows", n).Msg("giving up on writing outcomes; the rows' leases will expire and be rescued")
			return
		}
		p.log.Error().Err(err).Int("rows", n).Dur("retry_in", delay).Msg("writing outcomes failed")
		sleepCtx(ctx, delay)
		delay = min(delay*2, 5*time.Second)
	}

	for _, r := range batch {
		if !applied[r.id] {
			p.metrics.fenced.Inc()
			p.rowLog(zerolog.WarnLevel, r).Str("outcome", r.outcome).
				Msg("fenced: lease lost before completion, outcome not applied")
			continue
		}
		p.metrics.completed.WithLabelValues(r.outcome).Inc()
		switch r.outcome {
		case outcomeProcessed:
			p.rowLog(zerolog.DebugLevel, r).Msg("processed")
		case outcomeRetried:
			p.rowLog(zerolog.WarnLevel, r).Dur("retry_in", r.delay).Msg("attempt failed, will retry")
		case outcomeDead:
			p.rowLog(zerolog.ErrorLevel, r).Msg("dead")
		case outcomeReleased:
			p.rowLog(zerolog.InfoLevel, r).Msg("released at shutdown")
		}
	}
}

// writeOutcomes runs the fenced batch completion and returns the ids it
// applied. Released rows are announced so other workers take them at once.
func (p *Pool) writeOutcomes(ctx context.Context, ids, tokens []int64, statuses []string, delays []int64,
	errs []*string, deltas []int32, notify bool,
) (map[int64]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := p.db.Query(ctx, completeSQL, ids, tokens, statuses, delays, errs, deltas)
	if err != nil {
		return nil, fmt.Errorf("complete batch: %w", err)
	}
	applied := make(map[int64]bool, len(ids))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("complete batch: %w", err)
		}
		applied[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("complete batch: %w", err)
	}
	if notify {
		if _, err := p.db.Exec(ctx, notifySQL); err != nil {
			p.log.Warn().Err(err).Msg("notify after release failed; other workers will poll")
		}
	}
	return applied, nil
}
