package worker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
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
	const batch = 500
	for start := 0; start < n; start += batch {
		size := min(batch, n-start)
		src := make([]string, size)
		ids := make([]string, size)
		types := make([]string, size)
		payloads := make([][]byte, size)
		for i := range size {
			src[i], ids[i], types[i] = "bench", fmt.Sprintf("%s-%d", prefix, start+i), "bench.event"
			payloads[i] = []byte(`{"order_id":12345,"amount":"99.90","currency":"EUR","note":"benchmark payload"}`)
		}
		if _, err := db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])
			ON CONFLICT (source, event_id) DO NOTHING`, src, ids, types, payloads); err != nil {
			return err
		}
	}
	return nil
}

// rawClaimSQL and rawCompleteSQL are the yardstick's statements: the least a
// claim and a fenced batch completion need, without the engine's routes,
// ordering, byte budget or lock ordering. They stay as they are when the
// engine's own statements change.
const (
	rawClaimSQL = `
WITH picked AS (
    SELECT id FROM inbox
    WHERE status = 'received' AND available_at <= now()
    ORDER BY available_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE inbox AS i
SET status = 'processing', attempts = i.attempts + 1, lease_token = $2,
    lease_expires_at = now() + $3::bigint * interval '1 millisecond', locked_by = $4, updated_at = now()
FROM picked
WHERE i.id = picked.id
RETURNING i.id`
	rawCompleteSQL = `
UPDATE inbox AS i
SET status = 'processed', processed_at = now(), lease_token = NULL, lease_expires_at = NULL,
    locked_by = NULL, updated_at = now()
FROM unnest($1::bigint[], $2::bigint[]) AS c(id, lease_token)
WHERE i.id = c.id AND i.lease_token = c.lease_token`
)

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
		var done atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := insertBatches(ctx, db.Pool, "raw", n); err != nil {
				errs <- err
			}
		}()
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done.Load() < int64(n) {
					rows, err := db.Pool.Query(ctx, rawClaimSQL, 500, int64(7), int64(30000), "raw")
					if err != nil {
						errs <- err
						return
					}
					ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
					if err != nil {
						errs <- err
						return
					}
					if len(ids) == 0 {
						continue
					}
					tokens := make([]int64, len(ids))
					for j := range tokens {
						tokens[j] = 7
					}
					if _, err := db.Pool.Exec(ctx, rawCompleteSQL, ids, tokens); err != nil {
						errs <- err
						return
					}
					done.Add(int64(len(ids)))
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
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
