package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// keyRuns records, per key, the rows in flight and the order in which rows
// started, and which keys ever had two rows in flight at once.
type keyRuns struct {
	mu       sync.Mutex
	inFlight map[string][]string // key → event ids running now
	started  []string            // event ids, in start order
	overlaps []string            // "<running> beside <started>"
}

func newKeyRuns() *keyRuns { return &keyRuns{inFlight: map[string][]string{}} }

func (k *keyRuns) enter(key, eventID string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, other := range k.inFlight[key] {
		k.overlaps = append(k.overlaps, eventID+" started while "+other+" ran (key "+key+")")
	}
	k.inFlight[key] = append(k.inFlight[key], eventID)
	k.started = append(k.started, eventID)
}

func (k *keyRuns) leave(key, eventID string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cur := k.inFlight[key]
	for i, e := range cur {
		if e == eventID {
			k.inFlight[key] = append(cur[:i:i], cur[i+1:]...)
			break
		}
	}
}

func (k *keyRuns) report() (started, overlaps []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.started...), append([]string(nil), k.overlaps...)
}

// Reproduction from the reliability issue: a SQL producer's transaction
// inserts row A of an ordered key and stays open; row B of the same key is
// inserted after it (a higher id), committed and claimed; then A commits.
// The claim looked only at rows before a candidate, so A (no row before it)
// was claimed while B ran: "start B (running for key: 1)", "start A
// (running for key: 2)". A head is now refused while any row of its key is
// processing, whatever its id: A waits for B and runs after it.
func TestOrderedLateCommitWaitsForTheRunningRowOfItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	runs := newKeyRuns()
	releaseB := make(chan struct{})
	if err := b.reg.HandleFunc("late", func(ctx context.Context, ev *handlers.Event) error {
		key := string(ev.Key)
		runs.enter(key, ev.EventID)
		defer runs.leave(key, ev.EventID)
		if ev.EventID == "B" {
			select {
			case <-releaseB:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, handlers.Ordered(handlers.OnDeadBlock)); err != nil {
		t.Fatal(err)
	}
	b.start(t, testConfig())

	// A: inserted first (the lower id), its transaction held open.
	tx, err := b.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, key) VALUES ('test', 'A', 'late', 'k')`); err != nil {
		t.Fatal(err)
	}
	// B: a later row of the key, committed at once, and claimed.
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, key) VALUES ('test', 'B', 'late', 'k')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "B running", func() bool {
		started, _ := runs.report()
		return len(started) == 1 && started[0] == "B"
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A barrier: a row of another key inserted after A committed is claimed
	// by a claim that sees A too (A, older, sorts before it).
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, key) VALUES ('test', 'C', 'late', 'other')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "C, inserted after A committed, processed", func() bool { return b.row(t, "C").Status == "processed" })
	if _, overlaps := runs.report(); len(overlaps) > 0 {
		t.Errorf("two rows of one key ran at once: %v", overlaps)
	}
	if r := b.row(t, "A"); r.Status != "received" {
		t.Errorf("A is %s while B runs, want received (waiting for B)", r.Status)
	}
	close(releaseB)
	waitFor(t, 10*time.Second, "A and B processed", func() bool {
		return b.row(t, "A").Status == "processed" && b.row(t, "B").Status == "processed"
	})
	started, overlaps := runs.report()
	if len(overlaps) > 0 {
		t.Errorf("two rows of one key ran at once: %v", overlaps)
	}
	var keyK []string
	for _, e := range started {
		if e != "C" {
			keyK = append(keyK, e)
		}
	}
	// The documented order: among the rows visible at claim time, by id; a
	// row committed after a later row of its key ran runs after it.
	if len(keyK) != 2 || keyK[0] != "B" || keyK[1] != "A" {
		t.Errorf("key k ran as %v, want [B A]", keyK)
	}
}

// Suspected on reading (reliability issue, 14c), and so: a row the rescuer
// moves to dead on an ordered route whose dead rows do not block (on_dead:
// skip) left the row parked behind it parked until the unpark sweeper's
// next round (every tenth rescue round: up to 150 s by default). The
// rescuer now unparks at once, as a completion to dead does.
func TestRescuedDeadRowOnSkipRouteUnparksItsSuccessor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := b.reg.HandleFunc("skp", func(context.Context, *handlers.Event) error { return nil },
		handlers.Ordered(handlers.OnDeadSkip)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, key, status, attempts, started, lease_token, lease_expires_at, locked_by)
		VALUES ('test', 'head', 'skp', 'k', 'processing', 3, true, 1, now() - interval '1 second', 'gone');
		INSERT INTO inbox (source, event_id, event_type, key, available_at)
		VALUES ('test', 'next', 'skp', 'k', '9999-12-31 00:00:00+00')`); err != nil {
		t.Fatal(err)
	}
	p := newTestPool(t, b) // MaxAttempts 3: the head's lease expired on its last attempt
	if n, err := p.Rescue(ctx); err != nil || n != 1 {
		t.Fatalf("Rescue = %d, %v; want 1", n, err)
	}
	if r := b.row(t, "head"); r.Status != "dead" {
		t.Fatalf("head is %s after the rescue, want dead", r.Status)
	}
	if r := b.row(t, "next"); r.Status != "received" || r.AvailableAt.Year() == 9999 {
		t.Errorf("next is %s, due %s, once the rescuer moved the head to dead on a skip route: want received and due now", r.Status, r.AvailableAt)
	}
}
