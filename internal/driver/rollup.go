package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	rollupAddSQL   = load("rollup_add.sql")
	rollupPruneSQL = load("rollup_prune.sql")
	rollupReadSQL  = load("rollup_read.sql")
)

// The rollup's spans (migration 018).
const (
	SpanMinute = 60
	SpanHour   = 3600
)

// RollupCell is one route's counts over one span (a minute or an hour).
type RollupCell struct {
	// Span is SpanMinute or SpanHour; At the span's start.
	Span  int
	At    time.Time
	Route string
	// Processed, Retried and Dead count the outcomes: rows processed,
	// attempts that failed and will be retried, rows that died.
	Processed, Retried, Dead int64
	// Latency counts the processed rows by their latency from received to
	// processed, per bucket (maintenance.LatencyBounds).
	Latency []int64
}

// AddRollup adds cells to the rollup in one batch of upserts
// (sql/rollup_add.sql); send them sorted by (span, at, route).
func AddRollup(ctx context.Context, db interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}, cells []RollupCell) error {
	var b pgx.Batch
	for _, c := range cells {
		b.Queue(rollupAddSQL, pgx.NamedArgs{"span": c.Span, "at": c.At, "route": c.Route, "processed": c.Processed,
			"retried": c.Retried, "dead": c.Dead, "buckets": c.Latency})
	}
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("add to the rollup: %w", err)
	}
	return nil
}

// PruneRollup deletes the minutes older than minutes and the hours older
// than hours (sql/rollup_prune.sql), returning how many cells it deleted.
func PruneRollup(ctx context.Context, db DB, minutes, hours time.Duration) (int64, error) {
	tag, err := db.Exec(ctx, rollupPruneSQL, pgx.NamedArgs{"minutes_for": minutes.Seconds(), "hours_for": hours.Seconds()})
	if err != nil {
		return 0, fmt.Errorf("prune the rollup: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ReadRollup returns the cells of span since since, of route ("" = every
// route), oldest first (sql/rollup_read.sql).
func ReadRollup(ctx context.Context, db DB, span int, since time.Time, route string) ([]RollupCell, error) {
	out, err := queryAll(ctx, db, rollupReadSQL, pgx.NamedArgs{"span": span, "since": since, "route": route},
		func(r pgx.CollectableRow) (RollupCell, error) {
			c := RollupCell{Span: span}
			err := r.Scan(&c.At, &c.Route, &c.Processed, &c.Retried, &c.Dead, &c.Latency)
			return c, err
		})
	if err != nil {
		return nil, fmt.Errorf("read the rollup: %w", err)
	}
	return out, nil
}
