package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/handlers"
)

// batchRows is the batch route's max_rows in the batch part.
const batchRows = 100

// upsertsDDL is the table of the batch part's handlers: one row per event
// id, upserted.
const upsertsDDL = `CREATE TABLE bench_upserts (
    id      text PRIMARY KEY,
    payload bytea NOT NULL,
    seen    integer NOT NULL DEFAULT 1
)`

// benchBatchRuns is the batch part: the daemon end to end from Kafka with
// a transactional handler that upserts each event into a table of its own
// (bench_upserts), once per row (batch-row: HandleTx) and once per batch of
// batchRows rows (batch-100: HandleTxBatch, one unnest upsert per batch),
// each on a database of its own; the daemon's defaults otherwise.
func benchBatchRuns(ctx context.Context, env *environment, n int) ([]Rate, error) {
	perRow := handlers.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO bench_upserts (id, payload) VALUES ($1, $2)
			ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, seen = bench_upserts.seen + 1`, ev.EventID, ev.Payload)
		return err
	})
	batched := handlers.TxBatchHandlerFunc(func(ctx context.Context, tx pgx.Tx, evs []*handlers.Event) error {
		ids := make([]string, len(evs))
		payloads := make([][]byte, len(evs))
		for i, ev := range evs {
			ids[i], payloads[i] = ev.EventID, ev.Payload
		}
		_, err := tx.Exec(ctx, `INSERT INTO bench_upserts (id, payload)
			SELECT * FROM unnest($1::text[], $2::bytea[])
			ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, seen = bench_upserts.seen + 1`, ids, payloads)
		return err
	})
	var rates []Rate
	for _, batch := range []bool{false, true} {
		reg := handlers.NewRegistry()
		name, label := "batch-row", "transactional upsert per row, end to end"
		var err error
		if batch {
			name, label = fmt.Sprintf("batch-%d", batchRows), fmt.Sprintf("transactional upsert per batch of %d rows, end to end", batchRows)
			err = reg.HandleTxBatch(eventType, batched, handlers.Batching(batchRows, 0, 0))
		} else {
			err = reg.HandleTx(eventType, perRow)
		}
		if err != nil {
			return nil, err
		}
		r, err := benchBatchRun(ctx, env, n, reg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.Name, r.Label = name, label
		rates = append(rates, r)
	}
	return rates, nil
}

// benchBatchRun is one run of the batch part with reg's handler.
func benchBatchRun(ctx context.Context, env *environment, n int, reg *handlers.Registry) (Rate, error) {
	db, pool, done, err := env.open(ctx, 0)
	if err != nil {
		return Rate{}, err
	}
	defer done()
	if _, err := pool.Exec(ctx, upsertsDDL); err != nil {
		return Rate{}, err
	}
	k, lastIDs, _, cleanup, err := filledKafka(ctx, n)
	if err != nil {
		return Rate{}, err
	}
	defer cleanup()
	dir, err := os.MkdirTemp("", "inboxd-bench-batch-")
	if err != nil {
		return Rate{}, err
	}
	defer os.RemoveAll(dir)
	routes := filepath.Join(dir, "routes.yaml")
	// The events' type is routed in Go (reg), not by the file.
	if err := os.WriteFile(routes, []byte("routes: []\ndefault: dead\n"), 0o600); err != nil {
		return Rate{}, err
	}
	m, err := measureDaemonWith(ctx, db, pool, topic, lastIDs, n, daemonEnv(db, k, routes), profiles{}, "", nil, reg)
	if err != nil {
		return Rate{}, err
	}
	var rows, seen int
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(seen), 0) FROM bench_upserts`).Scan(&rows, &seen); err != nil {
		return Rate{}, err
	}
	if rows != n || seen != n {
		return Rate{}, fmt.Errorf("bench_upserts holds %d rows upserted %d times, want %d once each", rows, seen, n)
	}
	return m.rate("", "", n), nil
}
