package partitions_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// TestDedupAcrossPartitionSwitches inserts the same event ids from several
// connections at once, through ingest's statement and a third party's
// plain INSERT … ON CONFLICT DO NOTHING, while the current generation
// switches under them many times: every id is stored exactly once, and the
// inserts' own counts add up to the ids (no insert counted a duplicate as
// new).
func TestDedupAcrossPartitionSwitches(t *testing.T) {
	db := pgtest.NewPartitioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const (
		ids     = 3000
		writers = 6
		batch   = 25
	)
	var inserted, attempted, retried atomic.Int64
	stop := make(chan struct{})
	var switches atomic.Int64
	switchDone := make(chan error, 1)
	go func() {
		// A switch each time the writers have sent another 1/40 of their
		// rows: some 40 switches spread over the run.
		gen := int64(1)
		if _, err := driver.CreatePartition(ctx, db.Pool, "inbox", 2); err != nil {
			switchDone <- err
			return
		}
		step := int64(ids * writers / 40)
		next := step
		for {
			select {
			case <-stop:
				switchDone <- nil
				return
			default:
			}
			if attempted.Load() < next {
				runtime.Gosched()
				continue
			}
			next += step
			gen++
			// The partition after the next one is made ahead, as
			// maintenance makes it: a statement whose plan started before
			// a partition was attached cannot route rows into it.
			if _, err := driver.CreatePartition(ctx, db.Pool, "inbox", gen+1); err != nil {
				switchDone <- err
				return
			}
			if err := driver.SwitchPartition(ctx, db.Pool, "inbox", gen, time.Second); err != nil {
				switchDone <- err
				return
			}
			switches.Add(1)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := rand.Perm(ids)
			for i := 0; i < len(order); i += batch {
				chunk := order[i:min(i+batch, len(order))]
				if w%3 == 2 {
					// A third party's plain INSERT, one row at a time.
					for _, id := range chunk {
						tag, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload)
							VALUES ('s', $1, 't', '') ON CONFLICT DO NOTHING`, "e"+strconv.Itoa(id))
						if err != nil {
							errs <- err
							return
						}
						inserted.Add(tag.RowsAffected())
						attempted.Add(1)
					}
					continue
				}
				rows := make([]driver.NewRow, len(chunk))
				for j, id := range chunk {
					rows[j] = driver.NewRow{Source: "s", EventID: "e" + strconv.Itoa(id), EventType: "t",
						Payload: []byte{}, Headers: []byte("{}"), Status: status.Received}
				}
				// Two batches holding the same ids in other orders can
				// deadlock on each other's uncommitted keys, on a plain
				// table too: the sources' writer retries a transient
				// failure, and so does this one.
				n, _, err := driver.InsertBatch(ctx, db.Pool, rows, nil)
				for err != nil && driver.Classify(err) == driver.Transient && ctx.Err() == nil {
					retried.Add(1)
					n, _, err = driver.InsertBatch(ctx, db.Pool, rows, nil)
				}
				if err != nil {
					errs <- err
					return
				}
				inserted.Add(int64(n))
				attempted.Add(int64(len(rows)))
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-switchDone; err != nil {
		t.Fatalf("switch: %v", err)
	}
	close(errs)
	for err := range errs {
		t.Fatalf("insert: %v", err)
	}
	var rows, distinct, gens int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id), count(DISTINCT gen) FROM inbox`).Scan(&rows, &distinct, &gens); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d switches; rows in %d generations; %d batches retried after a transient failure (deadlock)", switches.Load(), gens, retried.Load())
	if rows != ids || distinct != ids {
		t.Errorf("%d rows, %d distinct events; want %d of each", rows, distinct, ids)
	}
	if got := inserted.Load(); got != ids {
		t.Errorf("the inserts counted %d rows inserted; want %d", got, ids)
	}
	if gens < 10 {
		t.Errorf("rows in %d generations: the switches did not happen under the inserts (want at least 10)", gens)
	}
	var dups int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM inbox GROUP BY source, event_id HAVING count(*) > 1) d`).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if dups > 0 {
		t.Errorf("%d events stored more than once", dups)
	}
}
