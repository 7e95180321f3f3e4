package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	inboxparts "github.com/inboxd/inboxd/internal/partitions"
)

// The dedup part: the cost per insert of exact deduplication across
// partitions (the fence's shared lock in the rows' default, the probe
// trigger's index lookups into the other partitions) against today's
// single unique index. Ingest's own statement (driver.InsertBatch, 100
// rows a batch) from 4 connections, into an inbox already holding rows;
// new events, then redeliveries of events stored in the oldest partition.

// DedupResults is what -run dedup measured (docs/bench/dedup.json).
type DedupResults struct {
	GeneratedAt time.Time `json:"generated_at"`
	Machine     Machine   `json:"machine"`
	// Rows is the new events inserted per measurement, Held the rows the
	// inbox held before (spread over the partitions).
	Rows int `json:"rows"`
	Held int `json:"held"`
	// Runs are one per shape: the plain table, then partitioned with 2, 4
	// and 8 partitions in the window.
	Runs []DedupRun `json:"runs"`
}

// DedupRun is one shape's measurement.
type DedupRun struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	// NewMicros and DupMicros are the wall time per row of the new
	// events and of the redeliveries (4 connections at once).
	NewMicros float64 `json:"new_us_per_row"`
	DupMicros float64 `json:"duplicate_us_per_row"`
	// NewRatio and DupRatio are over the plain table's.
	NewRatio float64 `json:"new_ratio"`
	DupRatio float64 `json:"duplicate_ratio"`
}

const (
	dedupBatch = 100
	dedupConns = 4
)

func benchDedup(ctx context.Context, env *environment, rows, held int, machine Machine, logf func(string, ...any)) (*DedupResults, error) {
	res := &DedupResults{GeneratedAt: time.Now().UTC().Truncate(time.Second), Machine: machine, Rows: rows, Held: held}
	for _, parts := range []int{0, 2, 4, 8} {
		run, err := dedupRun(ctx, env, rows, held, parts)
		if err != nil {
			return nil, err
		}
		if len(res.Runs) > 0 {
			run.NewRatio = run.NewMicros / res.Runs[0].NewMicros
			run.DupRatio = run.DupMicros / res.Runs[0].DupMicros
		} else {
			run.NewRatio, run.DupRatio = 1, 1
		}
		logf("  %-28s new events %6.1f µs/row (%.2fx), redeliveries %6.1f µs/row (%.2fx)",
			run.Name, run.NewMicros, run.NewRatio, run.DupMicros, run.DupRatio)
		res.Runs = append(res.Runs, run)
	}
	return res, nil
}

func dedupRun(ctx context.Context, env *environment, rows, held, parts int) (DedupRun, error) {
	run := DedupRun{Name: "one table, unique index", Partitions: parts}
	if parts > 0 {
		run.Name = fmt.Sprintf("partitioned, %d partitions", parts)
	}
	db, pool, done, err := env.open(ctx, dedupConns+1)
	if err != nil {
		return run, err
	}
	defer done()
	fill := func(from, n int) error {
		_, err := pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload, status, attempts, processed_at)
			SELECT 'orders', 'h' || g, 'bench.event', '\x7b7d', 'processed', 1, now()
			FROM generate_series($1::int, $2::int) AS g`, from, from+n-1)
		return err
	}
	if parts == 0 {
		if err := fill(0, held); err != nil {
			return run, err
		}
	} else {
		for _, t := range inboxparts.Tables {
			if err := inboxparts.Convert(ctx, pool, t, time.Hour, zerolog.Nop()); err != nil {
				return run, err
			}
		}
		// Partition 0 is empty (converted so); partitions 1 … parts hold
		// the rows, then 2 … parts+1 are in the window once the next is
		// current: parts partitions in all, the current one included.
		per := held / (parts - 1)
		for g := 1; g < parts; g++ {
			if err := fill((g-1)*per, per); err != nil {
				return run, err
			}
			if _, err := driver.CreatePartition(ctx, pool, "inbox", int64(g+1)); err != nil {
				return run, err
			}
			if err := driver.SwitchPartition(ctx, pool, "inbox", int64(g+1), time.Second); err != nil {
				return run, err
			}
		}
		if _, err := pool.Exec(ctx, `DROP TABLE inbox_p0`); err != nil {
			return run, err
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE inbox`); err != nil {
		return run, err
	}
	_ = db
	if run.NewMicros, err = timedInserts(ctx, pool, "n", rows); err != nil {
		return run, err
	}
	// Redeliveries of the oldest rows held (the first partition's).
	if run.DupMicros, err = timedInserts(ctx, pool, "h", min(rows, held/max(parts-1, 1))); err != nil {
		return run, err
	}
	return run, nil
}

// timedInserts inserts events prefix0 … prefix(n-1) in batches from
// dedupConns connections at once, and returns the wall time per row in µs.
func timedInserts(ctx context.Context, pool *pgxpool.Pool, prefix string, n int) (float64, error) {
	var wg sync.WaitGroup
	errs := make(chan error, dedupConns)
	start := time.Now()
	for c := range dedupConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]driver.NewRow, 0, dedupBatch)
			for i := c; i < n; i += dedupConns {
				batch = append(batch, driver.NewRow{Source: "orders", EventID: prefix + strconv.Itoa(i), EventType: "bench.event",
					Payload: benchPayload, Headers: []byte("{}"), Status: status.Received})
				if len(batch) == dedupBatch || i+dedupConns >= n {
					if _, _, err := driver.InsertBatch(ctx, pool, batch, nil); err != nil {
						errs <- err
						return
					}
					batch = batch[:0]
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(el.Microseconds()) / float64(n), nil
}
