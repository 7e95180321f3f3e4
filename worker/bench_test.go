package worker

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/yardstick"
	"github.com/inboxd/inboxd/migrations/pgtest"
)

// benchEvents is how many events one benchmark iteration moves
// (INBOXD_BENCH_EVENTS overrides it).
func benchEvents() int {
	if n, err := strconv.Atoi(os.Getenv("INBOXD_BENCH_EVENTS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

// insertBatches inserts n received rows in 500-row unnest statements.
func insertBatches(ctx context.Context, db *pgxpool.Pool, prefix string, n int) error {
	return yardstick.InsertRows(ctx, db, prefix, "bench.event", n)
}

// BenchmarkRawPipeline is the yardstick from DESIGN.md: the least an inbox
// needs, in raw SQL — 500-row unnest inserts, 500-row SKIP LOCKED claims and
// batched completions — on the same table, with two consumers.
func BenchmarkRawPipeline(b *testing.B) {
	n := benchEvents()
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		db := pgtest.New(b)
		start := time.Now()
		if err := yardstick.Run(ctx, db.Pool, n); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
}

// BenchmarkPool measures the worker pool alone: rows inserted by a
// concurrent producer (500-row statements) processed by a no-op handler.
func BenchmarkPool(b *testing.B) {
	n := benchEvents()
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		db := pgtest.New(b)
		reg := handlers.NewRegistry()
		var handled atomic.Int64
		allDone := make(chan struct{})
		_ = reg.HandleFunc("bench.event", func(context.Context, *handlers.Event) error {
			if handled.Add(1) == int64(n) {
				close(allDone)
			}
			return nil
		})
		p, err := New(db.Pool, reg, Config{}, zerolog.Nop(), prometheus.NewRegistry()) // the defaults
		if err != nil {
			b.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		stopped := make(chan struct{})
		go func() { _ = p.Run(runCtx); close(stopped) }()
		<-p.Ready()

		start := time.Now()
		if err := insertBatches(ctx, db.Pool, "pool", n); err != nil {
			b.Fatal(err)
		}
		<-allDone
		// Count until the outcomes are written, not just handled.
		for {
			var processed int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE status = 'processed'`).Scan(&processed); err != nil {
				b.Fatal(err)
			}
			if processed == n {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		total += time.Since(start)
		cancel()
		<-stopped
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
}
