// Package handlertest is the test kit for programs that embed inboxd: it
// inserts rows into the inbox as a source would (Insert), runs a
// registry's handler against a row as the workers do (Work), and waits
// for a row's outcome (WaitFor). Its functions work on a real PostgreSQL
// database migrated to inboxd's schema (`inboxd migrate`, or
// migrations.Up), the test's own: Work runs an engine that claims every
// due row of the database, not only the test's.
//
//	func TestOrderCreated(t *testing.T) {
//		reg := handlers.NewRegistry()
//		_ = reg.HandleFunc("order.created", handleOrderCreated)
//		out := handlertest.Work(t, db, reg, handlertest.Row{
//			Source: "orders", EventID: "o-1", EventType: "order.created", Payload: []byte(`{"id":1}`),
//		})
//		if out.Status != handlertest.Processed {
//			t.Fatalf("order.created: %+v", out)
//		}
//	}
package handlertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/worker"
)

// The statuses of an inbox row (docs/inbox-table.md), as Outcome.Status
// gives them.
const (
	// Received is a row waiting for its first attempt or, with Attempts
	// above 0, for a retry.
	Received = string(status.Received)
	// Processing is a row a worker holds under its lease.
	Processing = string(status.Processing)
	// Processed is a row its handler accepted.
	Processed = string(status.Processed)
	// Dead is a row that failed permanently, or used up its attempts.
	Dead = string(status.Dead)
	// Rejected is a message a source could not map to an event.
	Rejected = string(status.Rejected)
)

// Row is an inbox row as a source writes it.
type Row struct {
	// Source and EventID are the row's unique key: a second row with the
	// same pair is a duplicate, which the inbox drops.
	Source, EventID string
	// EventType routes the row to its handler.
	EventType string
	// Key orders the rows of ordered routes (nil: none).
	Key []byte
	// Payload is the message's body, stored byte for byte (nil: empty).
	Payload []byte
	// Headers are the message's headers, as the handler's Event.Headers
	// gives them back. Values are text: a source stores other bytes
	// base64-encoded, which a string of this map cannot ask for.
	Headers map[string]string
}

// Insert stores rows in db's inbox as a source does, in one batch: with
// the sources' own statement, as received rows due now. A row whose
// (Source, EventID) the inbox holds already is a duplicate and is left as
// it was. It returns how many rows were new.
func Insert(ctx context.Context, db *pgxpool.Pool, rows ...Row) (int, error) {
	batch := make([]driver.NewRow, len(rows))
	for i, r := range rows {
		if r.Source == "" || r.EventID == "" {
			return 0, fmt.Errorf("handlertest: row %d: Source and EventID are required", i+1)
		}
		headers := []byte("{}")
		if len(r.Headers) > 0 {
			var err error
			if headers, err = json.Marshal(r.Headers); err != nil {
				return 0, fmt.Errorf("handlertest: row %d: headers: %w", i+1, err)
			}
		}
		payload := r.Payload
		if payload == nil {
			payload = []byte{} // an empty message, as a source stores it
		}
		batch[i] = driver.NewRow{Source: r.Source, EventID: r.EventID, EventType: r.EventType, Key: r.Key,
			Payload: payload, Headers: headers, Status: status.Received}
	}
	n, _, err := driver.InsertBatch(ctx, db, batch, nil)
	if err != nil {
		return 0, fmt.Errorf("handlertest: insert: %w", err)
	}
	return n, nil
}

// Outcome is what became of a row.
type Outcome struct {
	// Status is the row's status: Received, Processing, Processed, Dead or
	// Rejected.
	Status string
	// Attempts is how many times a worker took the row.
	Attempts int
	// LastError is the error of the last failed attempt ("" if none).
	LastError string
}

// Attempted reports whether an attempt at the row has ended: it was taken
// at least once and no worker holds it now (it is processed, dead, or
// waiting for a retry).
func (o Outcome) Attempted() bool { return o.Attempts > 0 && o.Status != Processing }

// Lookup returns the outcome of the row (source, eventID); pgx.ErrNoRows
// when there is none.
func Lookup(ctx context.Context, db *pgxpool.Pool, source, eventID string) (Outcome, error) {
	var (
		o       Outcome
		lastErr *string
	)
	err := db.QueryRow(ctx, `SELECT status, attempts, last_error FROM inbox WHERE source = $1 AND event_id = $2`,
		source, eventID).Scan(&o.Status, &o.Attempts, &lastErr)
	if err != nil {
		return Outcome{}, err
	}
	if lastErr != nil {
		o.LastError = *lastErr
	}
	return o, nil
}

// pollInterval is how often WaitFor reads the row.
const pollInterval = 10 * time.Millisecond

// WaitFor waits until the outcome of the row (source, eventID) satisfies
// done, and returns it; it fails t when timeout passes first (or the row
// cannot be read), saying what it last saw.
func WaitFor(t testing.TB, db *pgxpool.Pool, source, eventID string, timeout time.Duration, done func(Outcome) bool) Outcome {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var (
		last  Outcome
		found bool
	)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), WorkTimeout)
		o, err := Lookup(ctx, db, source, eventID)
		cancel()
		switch {
		case err == nil:
			last, found = o, true
			if done(o) {
				return o
			}
		case !errors.Is(err, pgx.ErrNoRows):
			t.Fatalf("handlertest: read row %s/%s: %v", source, eventID, err)
		}
		select {
		case <-deadline.C:
			if !found {
				t.Fatalf("handlertest: no row %s/%s after %s", source, eventID, timeout)
			}
			t.Fatalf("handlertest: row %s/%s after %s: %+v", source, eventID, timeout, last)
		case <-tick.C:
		}
	}
}

// WorkTimeout bounds Work's wait for the row's first attempt.
const WorkTimeout = 30 * time.Second

// Work runs reg's handler for row as the daemon's workers run it, once:
// it inserts row into db (it fails t if the row is a duplicate), runs an
// engine (inboxd.New with reg, db for its statements and for
// transactional handlers' transactions, the default worker settings)
// until the row's first attempt has ended, stops it, and returns the
// row's outcome: Processed, Dead (a Permanent error, or no handler for the
// type under reg's default), or Received with Attempts 1 and the error in
// LastError (a retry, after the retry policy's first delay). A handler
// that does not return within WorkTimeout fails t.
func Work(t testing.TB, db *pgxpool.Pool, reg *handlers.Registry, row Row) Outcome {
	t.Helper()
	ib, err := inboxd.New(inboxd.Config{Registry: reg, DB: db, TxDB: db, Logger: zerolog.Nop(),
		Worker: worker.Config{PollInterval: worker.MinPollInterval}})
	if err != nil {
		t.Fatalf("handlertest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- ib.Run(ctx) }()
	select {
	case <-ib.Running():
	case err := <-ran:
		t.Fatalf("handlertest: the engine did not start: %v", err)
	}
	defer func() { // also when t fails below
		sctx, scancel := context.WithTimeout(context.Background(), WorkTimeout)
		defer scancel()
		if err := ib.StopAndCancel(sctx); err != nil {
			t.Errorf("handlertest: stop the engine: %v", err)
		}
		if err := <-ran; err != nil {
			t.Errorf("handlertest: the engine: %v", err)
		}
	}()
	switch n, err := Insert(ctx, db, row); {
	case err != nil:
		t.Fatal(err)
	case n != 1:
		t.Fatalf("handlertest: the inbox holds %s/%s already: Work needs a new row", row.Source, row.EventID)
	}
	return WaitFor(t, db, row.Source, row.EventID, WorkTimeout, Outcome.Attempted)
}
