package engine

import (
	"bytes"
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
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/yardstick"
	"github.com/inboxd/inboxd/worker"
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

// BenchmarkRawPipeline is the yardstick (docs/bench): the least an inbox
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
		p, err := New(db.Pool, reg, worker.Config{}, zerolog.Nop(), prometheus.NewRegistry()) // the defaults
		if err != nil {
			b.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		stopped := make(chan struct{})
		go func() { _ = startstop.Run(runCtx, p); close(stopped) }()
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

// BenchmarkKeyed measures the cost of ordering: a backlog of
// INBOXD_BENCH_EVENTS rows spread over 1,000 keys, drained by a pool with
// its defaults and a no-op handler, on an unordered route and on an ordered
// one (one row per key at a time, later rows parked). hot_key adds, ahead of
// that backlog, 100,000 rows of one single key on the ordered route: they
// are parked by the first claims and must not slow the other keys (its
// figure counts the other keys' rows only, and stops when they are done).
func BenchmarkKeyed(b *testing.B) {
	for _, tt := range []struct {
		name    string
		ordered bool
		hot     int
	}{
		{"unordered", false, 0},
		{"ordered", true, 0},
		{"ordered_hot_key", true, 100_000},
	} {
		b.Run(tt.name, func(b *testing.B) {
			n := benchEvents()
			ctx := context.Background()
			var total time.Duration
			for range b.N {
				db := pgtest.New(b)
				if tt.hot > 0 {
					insertKeyed(b, db, "hot", tt.hot, 1)
				}
				insertKeyed(b, db, "k", n, 1000)
				reg := handlers.NewRegistry()
				var opts []handlers.Option
				if tt.ordered {
					opts = append(opts, handlers.Ordered(handlers.OnDeadBlock))
				}
				var handled atomic.Int64
				allDone := make(chan struct{})
				_ = reg.HandleFunc("bench.event", func(_ context.Context, ev *handlers.Event) error {
					if !bytes.HasPrefix(ev.Key, []byte("hot")) && handled.Add(1) == int64(n) {
						close(allDone)
					}
					return nil
				}, opts...)
				p, err := New(db.Pool, reg, worker.Config{}, zerolog.Nop(), prometheus.NewRegistry())
				if err != nil {
					b.Fatal(err)
				}
				runCtx, cancel := context.WithCancel(ctx)
				stopped := make(chan struct{})
				start := time.Now()
				go func() { _ = startstop.Run(runCtx, p); close(stopped) }()
				<-allDone
				total += time.Since(start)
				cancel()
				<-stopped
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
		})
	}
}

// insertKeyed inserts n received rows of bench.event whose keys cycle
// through keys values prefix-0 … (so a key's rows are in id order).
func insertKeyed(b *testing.B, db *pgtest.DB, prefix string, n, keys int) {
	b.Helper()
	if _, err := db.Pool.Exec(context.Background(), `
		INSERT INTO inbox (source, event_id, event_type, key, payload)
		SELECT 'bench', $1 || '-' || g, 'bench.event', convert_to($1 || '-' || (g % $3), 'UTF8'), $4
		FROM generate_series(1, $2::int) AS g`, prefix, n, keys, yardstick.Payload); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(context.Background(), `ANALYZE inbox`); err != nil {
		b.Fatal(err)
	}
}
