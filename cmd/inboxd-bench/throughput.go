package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/handlers/riverjob"
	"github.com/inboxd/inboxd/worker"
)

// insertBatch is the rows (or jobs) one producer statement inserts.
const insertBatch = 500

// benchPayload is the payload of every throughput measurement, as in the go
// test benchmarks, so that all of them move the same bytes.
var benchPayload = []byte(`{"order_id":12345,"amount":"99.90","currency":"EUR","note":"benchmark payload"}`)

// insertRows inserts n received rows in 500-row unnest statements, as
// worker's BenchmarkRawPipeline and BenchmarkPool do.
func insertRows(ctx context.Context, db *pgxpool.Pool, prefix string, n int) error {
	for start := 0; start < n; start += insertBatch {
		size := min(insertBatch, n-start)
		src := make([]string, size)
		ids := make([]string, size)
		types := make([]string, size)
		payloads := make([][]byte, size)
		for i := range size {
			src[i], ids[i], types[i] = "bench", fmt.Sprintf("%s-%d", prefix, start+i), eventType
			payloads[i] = benchPayload
		}
		if _, err := db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])
			ON CONFLICT (source, event_id) DO NOTHING`, src, ids, types, payloads); err != nil {
			return err
		}
	}
	return nil
}

// rawClaimSQL and rawCompleteSQL are the yardstick's statements, copied from
// worker/bench_test.go (BenchmarkRawPipeline): the least a claim and a
// fenced batch completion need, without the engine's routes, ordering, byte
// budget or lock ordering.
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

// benchRaw is the yardstick: one producer inserting 500-row statements and
// two consumers claiming 500 rows with SKIP LOCKED and completing them in
// one statement, on pgxpool's default pool, from the first insert until
// every row is completed.
func benchRaw(ctx context.Context, env *environment, n int) (Rate, error) {
	db, err := env.newDatabase(ctx)
	if err != nil {
		return Rate{}, err
	}
	defer env.drop(db)
	pool, err := openPool(ctx, db, 0)
	if err != nil {
		return Rate{}, err
	}
	defer pool.Close()

	meter, err := startCPUMeter(ctx, pool, db)
	if err != nil {
		return Rate{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() {
		if err := insertRows(ctx, pool, "raw", n); err != nil {
			errs <- err
			cancel()
		}
	})
	for range 2 {
		wg.Go(func() {
			tokens := make([]int64, insertBatch)
			for j := range tokens {
				tokens[j] = 7
			}
			for done.Load() < int64(n) {
				rows, err := pool.Query(ctx, rawClaimSQL, insertBatch, int64(7), int64(30000), "raw")
				if err != nil {
					errs <- err
					cancel()
					return
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					errs <- err
					cancel()
					return
				}
				if len(ids) == 0 {
					continue
				}
				if _, err := pool.Exec(ctx, rawCompleteSQL, ids, tokens[:len(ids)]); err != nil {
					errs <- err
					cancel()
					return
				}
				done.Add(int64(len(ids)))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return Rate{}, err
	}
	r := newRate("raw", "raw SQL yardstick", n, elapsed)
	r.CPU, err = meter.stop(ctx)
	return r, err
}

// benchPool measures inboxd's worker pool alone, as BenchmarkPool: its
// defaults (worker.Config{}) on pgxpool's default pool, a no-op handler,
// rows inserted by a concurrent producer; the clock runs from the first
// insert until every row is processed in the table.
func benchPool(ctx context.Context, env *environment, n int) (Rate, error) {
	db, err := env.newDatabase(ctx)
	if err != nil {
		return Rate{}, err
	}
	defer env.drop(db)
	pool, err := openPool(ctx, db, 0)
	if err != nil {
		return Rate{}, err
	}
	defer pool.Close()

	reg := handlers.NewRegistry()
	var handled atomic.Int64
	allDone := make(chan struct{})
	if err := reg.HandleFunc(eventType, func(context.Context, *handlers.Event) error {
		if handled.Add(1) == int64(n) {
			close(allDone)
		}
		return nil
	}); err != nil {
		return Rate{}, err
	}
	p, err := worker.New(pool, reg, worker.Config{}, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		return Rate{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- p.Run(runCtx) }()
	defer func() { cancel(); <-stopped }()
	select {
	case <-p.Ready():
	case err := <-stopped:
		stopped <- err
		return Rate{}, fmt.Errorf("pool stopped before it was ready: %v", err)
	}

	meter, err := startCPUMeter(ctx, pool, db)
	if err != nil {
		return Rate{}, err
	}
	start := time.Now()
	if err := insertRows(ctx, pool, "pool", n); err != nil {
		return Rate{}, err
	}
	select {
	case <-allDone:
	case <-ctx.Done():
		return Rate{}, ctx.Err()
	case <-time.After(10 * time.Minute):
		return Rate{}, errors.New("not all rows handled after 10 minutes")
	}
	// Count until the outcomes are written, not just handled.
	for {
		var processed int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE status = 'processed'`).Scan(&processed); err != nil {
			return Rate{}, err
		}
		if processed == n {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := newRate("pool", "inboxd worker pool", n, time.Since(start))
	r.CPU, err = meter.stop(ctx)
	return r, err
}

// riverBenchArgs are the arguments of River's benchmark jobs: the same
// fields as benchPayload.
type riverBenchArgs struct {
	OrderID  int    `json:"order_id"`
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
	Note     string `json:"note"`
}

// Kind is the River job kind of riverBenchArgs.
func (riverBenchArgs) Kind() string { return "bench_event" }

// riverFetchPollInterval is River's fallback poll; River's own benchmark
// (riverbench) uses 20 ms with a 2 ms cooldown.
const riverFetchPollInterval = 20 * time.Millisecond

// benchRiver measures River on a database of its own (River's migrations
// applied with rivermigrate): a no-op worker, FetchCooldown 1 ms, workers
// MaxWorkers, jobs inserted with InsertManyFast in 500-job batches by a
// producer running beside the client. The clock runs from the client's
// start until the subscription has reported n completed jobs (River emits
// them once the completer has written them).
func benchRiver(ctx context.Context, env *environment, n, workers, conns int) (Rate, error) {
	db, err := env.newDatabase(ctx)
	if err != nil {
		return Rate{}, err
	}
	defer env.drop(db)
	pool, err := openPool(ctx, db, int32(conns))
	if err != nil {
		return Rate{}, err
	}
	defer pool.Close()
	if _, err := riverjob.Migrate(ctx, pool, nil); err != nil {
		return Rate{}, err
	}

	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(context.Context, *river.Job[riverBenchArgs]) error { return nil }))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: riverFetchPollInterval,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
	})
	if err != nil {
		return Rate{}, err
	}
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()

	meter, err := startCPUMeter(ctx, pool, db)
	if err != nil {
		return Rate{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return Rate{}, err
	}
	defer func() {
		stopCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		defer stop()
		_ = client.Stop(stopCtx)
	}()
	produced := make(chan error, 1)
	go func() {
		args := riverBenchArgs{OrderID: 12345, Amount: "99.90", Currency: "EUR", Note: "benchmark payload"}
		batch := make([]river.InsertManyParams, insertBatch)
		for i := range batch {
			batch[i].Args = args
		}
		for sent := 0; sent < n; sent += insertBatch {
			if _, err := client.InsertManyFast(ctx, batch[:min(insertBatch, n-sent)]); err != nil {
				produced <- err
				return
			}
		}
		produced <- nil
	}()

	timeout := time.After(10 * time.Minute)
	for completed := 0; completed < n; {
		select {
		case ev := <-events:
			if ev == nil {
				return Rate{}, errors.New("river's subscription closed")
			}
			if ev.Kind != river.EventKindJobCompleted {
				return Rate{}, fmt.Errorf("river job %d: %s", ev.Job.ID, ev.Kind)
			}
			completed++
		case err := <-produced:
			if err != nil {
				return Rate{}, fmt.Errorf("insert: %w", err)
			}
			produced = nil
		case <-timeout:
			return Rate{}, errors.New("not all jobs completed after 10 minutes")
		case <-ctx.Done():
			return Rate{}, ctx.Err()
		}
	}
	elapsed := time.Since(start)
	cpu, err := meter.stop(ctx)
	if err != nil {
		return Rate{}, err
	}

	var completed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
		return Rate{}, err
	}
	if completed != n {
		return Rate{}, fmt.Errorf("%d completed jobs in river_job, want %d", completed, n)
	}
	r := newRate("river", fmt.Sprintf("River (%d workers)", workers), n, elapsed)
	r.CPU = cpu
	return r, nil
}
