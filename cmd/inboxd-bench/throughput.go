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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/handlers/riverjob"
	"github.com/inboxd/inboxd/internal/engine"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/yardstick"
	"github.com/inboxd/inboxd/worker"
)

// insertBatch is the rows (or jobs) one producer statement inserts.
const insertBatch = yardstick.Batch

// benchPayload is the payload of every throughput measurement, as in the go
// test benchmarks, so that all of them move the same bytes.
var benchPayload = yardstick.Payload

// insertRows inserts n received rows of the benchmark's event type in
// 500-row unnest statements, as internal/engine's BenchmarkPool does.
func insertRows(ctx context.Context, db *pgxpool.Pool, prefix string, n int) error {
	return yardstick.InsertRows(ctx, db, prefix, eventType, n)
}

// benchRaw is the yardstick: one producer inserting 500-row statements and
// two consumers claiming 500 rows with SKIP LOCKED and completing them in
// one statement, on pgxpool's default pool, from the first insert until
// every row is completed.
func benchRaw(ctx context.Context, env *environment, n int) (Rate, error) {
	db, pool, done, err := env.open(ctx, 0)
	if err != nil {
		return Rate{}, err
	}
	defer done()

	// The yardstick writes inboxd's own table (yardstick.InsertRows and its
	// claim and completion are on inbox), so its write cost is inbox's too.
	writes, err := startWriteMeter(ctx, env, db, "inbox")
	if err != nil {
		return Rate{}, err
	}
	meter, err := startCPUMeter(ctx, pool, db)
	if err != nil {
		return Rate{}, err
	}
	start := time.Now()
	if err := yardstick.Run(ctx, pool, n); err != nil {
		return Rate{}, err
	}
	elapsed := time.Since(start)
	r := newRate("raw", "raw SQL yardstick", n, elapsed)
	if r.CPU, err = meter.stop(ctx); err != nil {
		return Rate{}, err
	}
	if err := writes.end(ctx); err != nil {
		return Rate{}, err
	}
	r.Writes, err = writes.finish(ctx, pool.Close, n)
	return r, err
}

// benchPool measures inboxd's worker pool alone, as BenchmarkPool: its
// defaults (worker.Config{}) on pgxpool's default pool, a no-op handler,
// rows inserted by a concurrent producer; the clock runs from the first
// insert until every row is processed in the table.
func benchPool(ctx context.Context, env *environment, n int) (Rate, error) {
	db, pool, done, err := env.open(ctx, 0)
	if err != nil {
		return Rate{}, err
	}
	defer done()

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
	p, err := engine.New(pool, reg, worker.Config{}, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		return Rate{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- startstop.Run(runCtx, p) }()
	stopPool := sync.OnceValue(func() error { cancel(); return <-stopped })
	defer stopPool()
	select {
	case <-p.Ready():
	case err := <-stopped:
		stopped <- err
		return Rate{}, fmt.Errorf("pool stopped before it was ready: %v", err)
	}

	writes, err := startWriteMeter(ctx, env, db, "inbox")
	if err != nil {
		return Rate{}, err
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
	if err := countProcessed(ctx, pool, n); err != nil {
		return Rate{}, err
	}
	r := newRate("pool", "inboxd worker pool", n, time.Since(start))
	if r.CPU, err = meter.stop(ctx); err != nil {
		return Rate{}, err
	}
	if err := writes.end(ctx); err != nil {
		return Rate{}, err
	}
	// The worker pool stops first (its shutdown is not the run's, but
	// what it writes is counted: it has nothing left to write), then its
	// connections close.
	r.Writes, err = writes.finish(ctx, func() { _ = stopPool(); pool.Close() }, n)
	return r, err
}

// countProcessed waits until n rows of the inbox on db are processed: the
// outcomes written, not just handled (a poll every 5 ms).
func countProcessed(ctx context.Context, db *pgxpool.Pool, n int) error {
	for {
		var processed int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE status = 'processed'`).Scan(&processed); err != nil {
			return err
		}
		if processed == n {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	db, pool, done, err := env.open(ctx, int32(conns))
	if err != nil {
		return Rate{}, err
	}
	defer done()
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
