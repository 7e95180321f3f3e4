package engine

import (
	"context"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// TestStartBitsAreRecordedAndCleanedUp: rows that wait in the queue have
// their start recorded in their claim's start bits before their handler
// runs (the rescuer reads them: a crash charges the row); the pool deletes
// a claim's bits once its rows are done, and the rescuer deletes those of a
// worker that died.
func TestStartBitsAreRecordedAndCleanedUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	var calls callCounter
	if err := b.reg.HandleFunc("x", func(ctx context.Context, ev *handlers.Event) error {
		calls.add(ev.EventID)
		if ev.EventID == "e-00001" {
			<-release // holds its start recorded while the test looks
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	all := ids("e", 40)
	b.insert(t, "x", all...)
	cfg := testConfig()
	cfg.Workers, cfg.Prefetch = 1, 40 // one handler: every row but the first waits in the queue
	p := b.start(t, cfg)

	waitFor(t, 10*time.Second, "the second row running", func() bool { return calls.get("e-00001") == 1 })
	var started bool
	if err := b.db.Pool.QueryRow(ctx, `
		SELECT coalesce(get_bit(s.bits, i.claim_pos - 1) = 1, false)
		FROM inbox AS i LEFT JOIN inbox_starts AS s ON s.token = i.lease_token
		WHERE i.event_id = 'e-00001'`).Scan(&started); err != nil {
		t.Fatal(err)
	}
	if !started {
		t.Error("a queued row's handler runs without its start in its claim's bits")
	}
	close(release)
	waitFor(t, 20*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == len(all) })
	waitFor(t, 10*time.Second, "the claims' start bits deleted", func() bool {
		var n int
		if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox_starts`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})

	// A dead worker's bits (no processing row carries the token), older
	// than a lease: the sweeper deletes them once the rescue has returned
	// the rows; a live claim's stay.
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO inbox_starts (token, bits, version, updated_at)
		VALUES (1, '\x01', 1, now() - interval '1 hour'), (2, '\x01', 1, now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Rescue(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.DropOrphanStarts(ctx); err != nil {
		t.Fatal(err)
	}
	var left []int64
	rows, err := b.db.Pool.Query(ctx, `SELECT token FROM inbox_starts ORDER BY token`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		left = append(left, tok)
	}
	if len(left) != 1 || left[0] != 2 {
		t.Errorf("start bits left after the sweep: tokens %v, want [2] (1 is an orphan, 2 too recent)", left)
	}
}
