// Package yardstick is the raw-SQL inbox pipeline that inboxd's
// benchmarks measure it against (docs/bench's yardstick): the least an
// inbox needs, written by hand — 500-row unnest inserts, 500-row SKIP
// LOCKED claims and one-statement fenced completions on the inbox table —
// without inboxd's routes, ordering, byte budget, lock ordering or Go side.
// worker's go test benchmarks and cmd/inboxd-bench both use it, so that
// they measure the same thing.
package yardstick

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Batch is the rows one insert, claim or completion statement moves.
const Batch = 500

// Payload is every benchmark row's payload, so that all measurements move
// the same bytes.
var Payload = []byte(`{"order_id":12345,"amount":"99.90","currency":"EUR","note":"benchmark payload"}`)

// The yardstick's claim and completion. They stay as they are when the
// engine's own statements change.
const (
	// ClaimSQL claims up to $1 due rows for lease token $2, lease $3 ms,
	// worker $4, and returns their ids.
	ClaimSQL = `
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
	// CompleteSQL marks the rows $1 processed where their lease token is
	// still $2's.
	CompleteSQL = `
UPDATE inbox AS i
SET status = 'processed', processed_at = now(), lease_token = NULL, lease_expires_at = NULL,
    locked_by = NULL, updated_at = now()
FROM unnest($1::bigint[], $2::bigint[]) AS c(id, lease_token)
WHERE i.id = c.id AND i.lease_token = c.lease_token`
)

// InsertRows inserts n received rows of eventType (source "bench", event
// ids prefix-0 … prefix-(n-1), Payload) in Batch-row unnest statements.
func InsertRows(ctx context.Context, db *pgxpool.Pool, prefix, eventType string, n int) error {
	for start := 0; start < n; start += Batch {
		size := min(Batch, n-start)
		src := make([]string, size)
		ids := make([]string, size)
		types := make([]string, size)
		payloads := make([][]byte, size)
		for i := range size {
			src[i], ids[i], types[i] = "bench", fmt.Sprintf("%s-%d", prefix, start+i), eventType
			payloads[i] = Payload
		}
		if _, err := db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])
			ON CONFLICT (source, event_id) DO NOTHING`, src, ids, types, payloads); err != nil {
			return err
		}
	}
	return nil
}

// Run moves n events through the yardstick on db: one producer inserting
// (InsertRows) while two consumers claim Batch rows and complete them,
// until every row is completed or a statement fails.
func Run(ctx context.Context, db *pgxpool.Pool, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	fail := func(err error) {
		errs <- err
		cancel()
	}
	wg.Go(func() {
		if err := InsertRows(ctx, db, "raw", "bench.event", n); err != nil {
			fail(err)
		}
	})
	for range 2 {
		wg.Go(func() {
			tokens := make([]int64, Batch)
			for j := range tokens {
				tokens[j] = 7
			}
			for done.Load() < int64(n) {
				rows, err := db.Query(ctx, ClaimSQL, Batch, int64(7), int64(30000), "raw")
				if err != nil {
					fail(err)
					return
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					fail(err)
					return
				}
				if len(ids) == 0 {
					continue
				}
				if _, err := db.Exec(ctx, CompleteSQL, ids, tokens[:len(ids)]); err != nil {
					fail(err)
					return
				}
				done.Add(int64(len(ids)))
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
