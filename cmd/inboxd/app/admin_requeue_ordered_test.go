package app

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/engine"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/worker"
)

// Reproduction from the reliability issue: on an ordered route with
// on_dead: skip, a dead row D lets its key move on; its successor E runs.
// `inboxd requeue --id D` then returned D to received with a lower id than
// the running E, and the claim, which looked only at rows before a
// candidate, ran D beside E. A head is now refused while any row of its key
// is processing: D runs after E, never beside it.
func TestRequeueOnSkipRouteWaitsForTheRunningSuccessor(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var mu sync.Mutex
	inFlight := map[string][]string{}
	var started, overlaps []string
	releaseE := make(chan struct{})
	reg := handlers.NewRegistry()
	if err := reg.HandleFunc("skp", func(ctx context.Context, ev *handlers.Event) error {
		key := string(ev.Key)
		mu.Lock()
		for _, other := range inFlight[key] {
			overlaps = append(overlaps, ev.EventID+" started while "+other+" ran")
		}
		inFlight[key] = append(inFlight[key], ev.EventID)
		started = append(started, ev.EventID)
		mu.Unlock()
		defer func() {
			mu.Lock()
			cur := inFlight[key]
			for i, e := range cur {
				if e == ev.EventID {
					inFlight[key] = append(cur[:i:i], cur[i+1:]...)
					break
				}
			}
			mu.Unlock()
		}()
		if ev.EventID == "E" {
			select {
			case <-releaseE:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, handlers.Ordered(handlers.OnDeadSkip)); err != nil {
		t.Fatal(err)
	}
	ids := insertRows(t, db, "inbox", `
		INSERT INTO inbox (source, event_id, event_type, key, status, attempts, last_error)
		VALUES ('s', 'D', 'skp', 'k', 'dead', 3, 'boom');
		INSERT INTO inbox (source, event_id, event_type, key) VALUES ('s', 'E', 'skp', 'k')`)
	pool, err := engine.New(db.Pool, reg, worker.Config{
		Workers: 4, MaxAttempts: 3, Lease: 5 * time.Second, PollInterval: 50 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
	}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- startstop.Run(runCtx, pool) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pool: %v", err)
		}
	})
	snapshot := func() (s, o []string) {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), started...), append([]string(nil), overlaps...)
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("E running (its key skips the dead D)", func() bool { s, _ := snapshot(); return len(s) == 1 && s[0] == "E" })

	env := []string{"INBOXD_DATABASE_URL=" + db.URL}
	if code, out, stderr := runMain(t, env, "requeue", "--id", itoa(ids["D"])); code != ExitOK || !strings.Contains(out, "requeued 1 dead row") {
		t.Fatalf("requeue --id D: exit %d\n%s%s", code, out, stderr)
	}
	// A barrier: a row of another key inserted after the requeue is claimed
	// by a claim that sees D requeued (D, due earlier, sorts before it).
	insertRows(t, db, "inbox", `INSERT INTO inbox (source, event_id, event_type, key) VALUES ('s', 'C', 'skp', 'other')`)
	wait("C processed", func() bool {
		return stateOf(t, db, ids["E"]).Status == "processing" && rowStatus(t, db, "C") == "processed"
	})
	if _, o := snapshot(); len(o) > 0 {
		t.Errorf("two rows of one key ran at once: %v", o)
	}
	if s := stateOf(t, db, ids["D"]); s.Status != "received" {
		t.Errorf("requeued D is %s while E runs, want received (waiting for E)", s.Status)
	}
	close(releaseE)
	wait("D and E processed", func() bool {
		return stateOf(t, db, ids["D"]).Status == "processed" && stateOf(t, db, ids["E"]).Status == "processed"
	})
	s, o := snapshot()
	if len(o) > 0 {
		t.Errorf("two rows of one key ran at once: %v", o)
	}
	var keyK []string
	for _, e := range s {
		if e != "C" {
			keyK = append(keyK, e)
		}
	}
	if strings.Join(keyK, ",") != "E,D" {
		t.Errorf("key k ran as %v, want [E D]", keyK)
	}
}

// rowStatus is the status of the row with event id eventID.
func rowStatus(t *testing.T, db *pgtest.DB, eventID string) string {
	t.Helper()
	var s string
	if err := db.Pool.QueryRow(context.Background(), `SELECT status FROM inbox WHERE event_id = $1`, eventID).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
