package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// Reproduction from the reliability report: a row with a 3,000-byte key
// could not be stored (index row size 3032 exceeds btree version 4 maximum
// 2704 for index "inbox_key_idx", SQLSTATE 54000), since the ordered
// routes' index held every key in full. It holds a hash of the key now:
// rows with keys of 3,000 bytes and 100 KB (inserted by SQL, which no
// ingest bound limits) are stored and processed, each key in arrival
// order, one row at a time, through a retry (a parked successor, then
// unparked). Two keys that differ only in their last byte stay two keys.
func TestLongKeysAreOrderedThroughTheKeyHash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const events = 8
	// Random bytes: a B-tree compresses a repetitive key below its limit.
	rnd := rand.NewChaCha8([32]byte{9})
	long := make([]byte, 3000)
	_, _ = rnd.Read(long)
	twin := bytes.Clone(long)
	twin[len(twin)-1] ^= 1
	huge := make([]byte, 100_000)
	_, _ = rnd.Read(huge)
	keys := [][]byte{long, twin, huge}
	log := newOrderLog()
	var mu sync.Mutex
	failed := map[string]bool{}
	if err := b.reg.HandleFunc("long.key", func(_ context.Context, ev *handlers.Event) error {
		var seq int
		if _, err := fmt.Sscanf(ev.EventID[len(ev.EventID)-3:], "%d", &seq); err != nil {
			return handlers.Permanent(err)
		}
		key := fmt.Sprintf("%x", ev.Key)
		log.enter(key)
		time.Sleep(time.Millisecond)
		mu.Lock()
		fail := seq == 3 && !failed[ev.EventID]
		failed[ev.EventID] = true
		mu.Unlock()
		log.leave(key, ev.EventID, seq, !fail)
		if fail {
			return errors.New("flaky")
		}
		return nil
	}, handlers.Ordered(""), handlers.MaxAttempts(5)); err != nil {
		t.Fatal(err)
	}
	for seq := range events {
		for k, key := range keys {
			if _, err := b.db.Pool.Exec(ctx,
				`INSERT INTO inbox (source, event_id, event_type, key) VALUES ('test', $1, 'long.key', $2)`,
				fmt.Sprintf("k%d:%03d", k, seq), key); err != nil {
				t.Fatalf("insert a row with a key of %d bytes: %v", len(key), err)
			}
		}
	}
	cfg := testConfig()
	cfg.Workers = 8
	b.start(t, cfg)
	waitFor(t, 60*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == events*len(keys) })
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlap) > 0 {
		t.Errorf("two rows of one key ran at once (%d times)", len(log.overlap))
	}
	for k, key := range keys {
		got := log.done[fmt.Sprintf("%x", key)]
		if len(got) != events {
			t.Errorf("key %d (%d bytes): %d events succeeded, want %d", k, len(key), len(got), events)
			continue
		}
		for i, seq := range got {
			if seq != i {
				t.Errorf("key %d (%d bytes): first successes in order %v, want 0..%d", k, len(key), got, events-1)
				break
			}
		}
	}
}

// The ordered routes' lookups (a row's nearest earlier row of its key in
// the claim, the chain of next rows) go through the index on the key's hash,
// inbox_key_hash_idx, and the old index on whole keys is gone.
func TestOrderedLookupsUseTheKeyHashIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := b.reg.HandleFunc("ord", func(context.Context, *handlers.Event) error { return nil }, handlers.Ordered("")); err != nil {
		t.Fatal(err)
	}
	b.insertKeyed(t, "ord", 50, 4)
	if _, err := b.db.Pool.Exec(ctx, `ANALYZE inbox`); err != nil {
		t.Fatal(err)
	}
	var old bool
	if err := b.db.Pool.QueryRow(ctx, `SELECT to_regclass('inbox_key_idx') IS NOT NULL`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if old {
		t.Error("inbox_key_idx (whole keys in a B-tree) is still there")
	}
	plan, err := ExplainClaim(ctx, b.db.Pool, b.reg, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	// The claim reads the key index three times: the processing check, the
	// row before (classified) and the chain (following).
	if n := strings.Count(plan, "inbox_key_hash_idx"); n < 3 {
		t.Errorf("the claim's plan reads inbox_key_hash_idx %d times, want 3:\n%s", n, plan)
	}
	// And the rows of its key that run through the small index of processing
	// ordered rows (migration 009).
	if !strings.Contains(plan, "inbox_processing_key_idx") {
		t.Errorf("the claim's plan does not read inbox_processing_key_idx:\n%s", plan)
	}
}
