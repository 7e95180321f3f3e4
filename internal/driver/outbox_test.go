package driver

import (
	"context"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// A relay's loops write outcomes while its lease loop renews the same
// shards: neither may wait for the other. (With FOR SHARE in the fence, a
// renewal waited behind an outcome's transaction, the next outcome behind
// the renewal, and two of them deadlocked: a second's stall each time.)
// A takeover, though, must not pass a zombie's write in flight: it skips
// the shard.
func TestOutcomeFenceAndRenewalDoNotWaitForEachOther(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	held, err := AcquireShards(ctx, db, "a", OutboxShards, time.Minute)
	if err != nil || len(held) != OutboxShards {
		t.Fatalf("acquire: %d shards, %v", len(held), err)
	}
	var id int64
	if err := db.QueryRow(ctx, `INSERT INTO outbox (destination, event_type) VALUES ('kafka:t', 't') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	written, err := RecordOutbox(ctx, tx, "a", held, []OutboxOutcome{{ID: id, Status: OutboxPublished}})
	if err != nil || len(written) != 1 {
		t.Fatalf("record: %v, %v", written, err)
	}
	// The outcome's transaction is open, its fence's locks held.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	renewed, err := RenewShards(rctx, db, "a", held, time.Minute)
	if err != nil || len(renewed) != OutboxShards {
		t.Fatalf("renewal while an outcome's write is open: %d renewed, %v (it waited for the fence's locks)", len(renewed), err)
	}
	// Expired meanwhile: another relay's takeover skips the shards whose
	// fence is held, and takes them once the write is over.
	if _, err := db.Exec(ctx, `UPDATE outbox_shards SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	var shard int16
	if err := db.QueryRow(ctx, `SELECT shard FROM outbox WHERE id = $1`, id).Scan(&shard); err != nil {
		t.Fatal(err)
	}
	taken := func() map[int16]bool {
		got, err := AcquireShards(ctx, db, "b", OutboxShards, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		m := map[int16]bool{}
		for _, l := range got {
			m[l.Shard] = true
		}
		return m
	}
	if taken()[shard] {
		t.Fatalf("shard %d of the row being written was taken over during the zombie's write", shard)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !taken()[shard] {
		t.Fatalf("shard %d not taken over once the write was over", shard)
	}
}
