package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A database outage pauses ingest without skipping anything: while writes
// fail no committed offset passes a message whose row is missing, Ready is
// false, and once the database is back every event is in the inbox exactly
// once.
func TestDatabaseOutagePausesWithoutLoss(t *testing.T) {
	t.Parallel()
	b := setupKafka(t, 2)
	ctx := t.Context()
	cfg := b.config()
	cfg.BatchSize = 10
	r := b.start(t, cfg, "c1")

	total := 0
	produce := func(n int) {
		var recs []*kgo.Record
		for range n {
			recs = append(recs, b.event(int32(total%2), fmt.Sprintf("ev-%d", total), "t", []byte(fmt.Sprint(total))))
			total++
		}
		b.produce(t, recs...)
	}

	// Committed offsets must never run ahead of the rows: every offset below
	// the committed one of a partition has its row (each message here has
	// its own event id, so exactly one row per offset).
	checkCommittedHaveRows := func(table string) map[int32]int64 {
		t.Helper()
		committed := b.committed(t) // read before the rows: commits follow inserts
		for p, c := range committed {
			var n int64
			if err := b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE kafka_partition = $1 AND kafka_offset < $2",
				p, c).Scan(&n); err != nil {
				t.Fatalf("count rows of partition %d: %v", p, err)
			}
			if n != c {
				t.Fatalf("partition %d committed at %d but only %d rows below it", p, c, n)
			}
		}
		return committed
	}

	produce(20)
	b.waitCommitted(t, 30*time.Second)
	before := checkCommittedHaveRows("inbox")

	// Outage 1: the table disappears (every insert fails, the connections
	// stay up).
	if _, err := b.db.Pool.Exec(ctx, "ALTER TABLE inbox RENAME TO inbox_offline"); err != nil {
		t.Fatal(err)
	}
	produce(30)
	waitFor(t, 20*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(r.c.Metrics.BatchWriteErrors)
		if !r.c.Ready() && n >= 3 {
			// Sample the invariant while the writes fail.
			now := checkCommittedHaveRows("inbox_offline")
			for p, c := range now {
				if c != before[p] {
					t.Fatalf("partition %d committed moved from %d to %d while no write succeeded", p, before[p], c)
				}
			}
		}
		return n >= 8, fmt.Sprintf("%v write errors, ready %t", n, r.c.Ready())
	})
	if r.c.Ready() {
		t.Error("Ready() = true during the outage")
	}
	if got := testutil.ToFloat64(r.c.Metrics.Ready); got != 0 {
		t.Errorf("ready gauge = %v during the outage", got)
	}
	if _, err := b.db.Pool.Exec(ctx, "ALTER TABLE inbox_offline RENAME TO inbox"); err != nil {
		t.Fatal(err)
	}

	// Outage 2: the consumer's connection is killed in the middle of an
	// insert (held on a lock so that it is surely in flight).
	for i := range 3 {
		errorsBefore := testutil.ToFloat64(r.c.Metrics.BatchWriteErrors)
		tx, err := b.db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		produce(10)
		var pid int32
		waitFor(t, 10*time.Second, func() (bool, string) {
			err := b.db.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
				WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO inbox%'`, b.db.Name).Scan(&pid)
			return err == nil, fmt.Sprintf("round %d: an insert waiting on the lock (%v)", i, err)
		})
		if _, err := b.db.Pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() (bool, string) {
			n := testutil.ToFloat64(r.c.Metrics.BatchWriteErrors)
			return n > errorsBefore, fmt.Sprintf("round %d: write errors still %v", i, n)
		})
		checkCommittedHaveRows("inbox")
	}

	b.waitCommitted(t, 30*time.Second)
	checkCommittedHaveRows("inbox")
	var rows, distinct int
	if err := b.db.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT event_id) FROM inbox WHERE event_id LIKE 'ev-%'").
		Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != total || distinct != total {
		t.Errorf("%d rows (%d distinct) after recovery, want %d", rows, distinct, total)
	}
	waitFor(t, 5*time.Second, func() (bool, string) { return r.c.Ready(), "Ready() after recovery" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}
