package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
)

// A row's history records its failed attempts and the attempt that
// finished it after them (worker, start, duration, outcome, error); a row
// processed at its first attempt records nothing; a row that dies records
// its last attempt as dead.
func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	calls := map[string]int{}
	if err := b.reg.HandleFunc("flaky", func(_ context.Context, ev *handlers.Event) error {
		mu.Lock()
		defer mu.Unlock()
		calls[ev.EventID]++
		if ev.EventID == "twice" && calls[ev.EventID] <= 2 {
			return errors.New("http 503")
		}
		if ev.EventID == "never" {
			return errors.New("http 500")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "flaky", "happy", "twice", "never")
	p := b.start(t, testConfig())
	waitFor(t, 20*time.Second, "every row finished", func() bool {
		return b.countStatus(t, "processed") == 2 && b.countStatus(t, "dead") == 1
	})
	p.stop(t)
	idOf := func(eventID string) int64 {
		var id int64
		if err := b.db.Pool.QueryRow(context.Background(), "SELECT id FROM inbox WHERE event_id = $1", eventID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	history := func(eventID string) []driver.Attempt {
		h, err := driver.History(context.Background(), b.db.Pool, idOf(eventID))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := history("happy"); len(h) != 0 {
		t.Errorf("the happy row recorded %d attempts: %+v", len(h), h)
	}
	h := history("twice")
	if len(h) != 3 || h[0].Outcome != "retried" || h[1].Outcome != "retried" || h[2].Outcome != "processed" {
		t.Fatalf("twice: %+v", h)
	}
	for i, a := range h {
		if a.Attempt != i+1 || a.Worker == "" || a.StartedAt.IsZero() || a.FinishedAt.Before(a.StartedAt) {
			t.Errorf("attempt %d: %+v", i+1, a)
		}
	}
	if h[0].Error != "attempt 1 of 3: http 503" || h[2].Error != "" {
		t.Errorf("errors: %q, %q", h[0].Error, h[2].Error)
	}
	if h := history("never"); len(h) != 3 || h[2].Outcome != "dead" || h[2].Error != "attempt 3 of 3: http 500" {
		t.Errorf("never: %+v", h)
	}
	// The per-route rollup counted the same outcomes (written by the
	// pool's maintenance, at the latest when it stopped).
	cells, err := driver.ReadRollup(context.Background(), b.db.Pool, driver.SpanHour, time.Now().Add(-2*time.Hour), "flaky")
	var processed, retried, dead int64
	for _, c := range cells {
		processed, retried, dead = processed+c.Processed, retried+c.Retried, dead+c.Dead
	}
	if err != nil || processed != 2 || retried != 4 || dead != 1 {
		t.Errorf("rollup: %d processed, %d retried, %d dead (%v); want 2, 4, 1", processed, retried, dead, err)
	}
}

// A row's history keeps its last driver.KeptAttempts attempts.
func TestAttemptHistoryKeepsTheLast25(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	for n := 1; n <= 30; n++ {
		err := driver.RecordAttempts(ctx, b.db.Pool, "w", []driver.Attempt{{RowID: 42, Attempt: n, StartedAt: now, FinishedAt: now, Outcome: "retried", Error: "e"}})
		if err != nil {
			t.Fatal(err)
		}
	}
	h, err := driver.History(ctx, b.db.Pool, 42)
	if err != nil || len(h) != driver.KeptAttempts || h[0].Attempt != 6 || h[24].Attempt != 30 {
		t.Fatalf("%d attempts kept (%v), from %d", len(h), err, h[0].Attempt)
	}
}
