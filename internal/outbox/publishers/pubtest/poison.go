package pubtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/testkit"
)

// RunTunedRelay makes a relay on db with pubs and cfg, logging to log, has
// tune adjust it (its backoffs) before it runs, and runs it until the test
// ends.
func RunTunedRelay(t *testing.T, db *pgtest.DB, cfg outbox.Config, pubs map[string]outbox.Publisher, log zerolog.Logger, tune func(r *outbox.Relay)) *outbox.Relay {
	t.Helper()
	r, err := outbox.New(db.Pool, pubs, cfg, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	tune(r)
	RunRelay(t, r)
	return r
}

// RunRelay runs r until the test ends.
func RunRelay(t *testing.T, r *outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = startstop.Run(ctx, r); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("relay did not stop")
		}
	})
}

// RowState is an outbox row's status, attempts and last_error, by event id.
func RowState(t *testing.T, db *pgtest.DB, eventID string) (status string, attempts int, lastErr string) {
	t.Helper()
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT status, attempts, coalesce(last_error, '') FROM outbox WHERE event_id = $1`, eventID).Scan(&status, &attempts, &lastErr); err != nil {
		t.Fatalf("row %s: %v", eventID, err)
	}
	return status, attempts, lastErr
}

// Poison is a row of a destination its broker's client cannot encode, for
// PoisonRowIsRefused.
type Poison struct {
	// EventID and Headers (a JSON object) are the row's.
	EventID, Headers string
	// Reason is what its last_error must name.
	Reason string
}

// PoisonRowIsRefused writes, with plain SQL as a third party would, two
// rows of key "a", the poison row of key "poison", a row after it of the
// same key and two more of key "a", all for dest; runs a relay with p for
// kind, logging to log, that retries quickly and gives up after three
// attempts; and fails t unless the poison row goes dead with an attempt
// counted and its reason, every other row being published: a refusal of
// that row, not an outage of its destination. It returns how many rows
// were published (3).
func PoisonRowIsRefused(t *testing.T, db *pgtest.DB, dest, kind string, p outbox.Publisher, log zerolog.Logger, poison Poison) int {
	t.Helper()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO outbox (destination, event_id, event_type, key, payload) VALUES ($1, 'ok-1', 't', 'a', 'x')`, dest)
	exec(`INSERT INTO outbox (destination, event_id, event_type, key, headers, payload)
		VALUES ($1, $2, 't', 'poison', $3, 'x')`, dest, poison.EventID, poison.Headers)
	exec(`INSERT INTO outbox (destination, event_id, event_type, key, payload) VALUES
		($1, 'after-poison', 't', 'poison', 'x'),
		($1, 'ok-2', 't', 'a', 'x')`, dest)
	cfg := RelayConfig()
	cfg.MaxAttempts = 3
	RunTunedRelay(t, db, cfg, map[string]outbox.Publisher{kind: p}, log, func(r *outbox.Relay) {
		_, hold := r.Backoffs()
		r.SetBackoffs(backoff.Exponential{Base: 50 * time.Millisecond, Max: 50 * time.Millisecond}, hold)
	})
	ok := []string{"ok-1", "ok-2", "after-poison"}
	testkit.WaitForReport(t, 30*time.Second, func() (bool, string) {
		var states []string
		done := true
		for _, id := range ok {
			st, n, _ := RowState(t, db, id)
			states = append(states, fmt.Sprintf("%s %s/%d", id, st, n))
			done = done && st == "published"
		}
		st, n, _ := RowState(t, db, poison.EventID)
		states = append(states, fmt.Sprintf("%.10s %s/%d", poison.EventID, st, n))
		done = done && st == "dead"
		return done, "the poison row dead and every other row published: " + strings.Join(states, ", ")
	})
	if _, attempts, lastErr := RowState(t, db, poison.EventID); attempts < 1 || !strings.Contains(lastErr, poison.Reason) {
		t.Errorf("%.10s: attempts %d, last_error %q; want an attempt counted and a reason naming %q", poison.EventID, attempts, lastErr, poison.Reason)
	}
	return len(ok)
}
