package handlertest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/handlers/handlertest"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// Every engine Work starts is stopped before it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Insert stores rows as a source does: received, no attempt yet, a
// repeated (source, event id) dropped as a duplicate; the handler gets the
// payload, key and headers back as stored.
func TestInsertAsASource(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	row := handlertest.Row{Source: "orders", EventID: "o-1", EventType: "order.created", Key: []byte("k-1"),
		Payload: []byte(`{"id":1}`), Headers: map[string]string{"traceparent": "00-x", "é": "ü"}}
	n, err := handlertest.Insert(ctx, db.Pool, row, handlertest.Row{Source: "orders", EventID: "o-2", EventType: "order.created"})
	if err != nil || n != 2 {
		t.Fatalf("Insert = %d, %v; want 2 new rows", n, err)
	}
	if n, err := handlertest.Insert(ctx, db.Pool, row); err != nil || n != 0 {
		t.Fatalf("Insert of a duplicate = %d, %v; want 0 new", n, err)
	}
	if o, err := handlertest.Lookup(ctx, db.Pool, "orders", "o-1"); err != nil || o != (handlertest.Outcome{Status: handlertest.Received}) {
		t.Fatalf("Lookup = %+v, %v; want received, no attempt", o, err)
	}
	if _, err := handlertest.Lookup(ctx, db.Pool, "orders", "nope"); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("Lookup of no row: %v, want pgx.ErrNoRows", err)
	}
	if _, err := handlertest.Insert(ctx, db.Pool, handlertest.Row{EventID: "x"}); err == nil {
		t.Fatal("Insert of a row without a source: no error")
	}

	// Work's engine takes o-1 and o-2 too: every due row of the database.
	var (
		mu   sync.Mutex
		seen = map[string]*handlers.Event{}
	)
	reg := handlers.NewRegistry()
	if err := reg.HandleFunc("order.created", func(_ context.Context, ev *handlers.Event) error {
		mu.Lock()
		seen[ev.EventID] = ev
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	row.EventID = "o-3"
	start := time.Now()
	if out := handlertest.Work(t, db.Pool, reg, row); out.Status != handlertest.Processed || out.Attempts != 1 {
		t.Fatalf("Work = %+v, want processed at the first attempt", out)
	}
	t.Logf("Work took %s", time.Since(start))
	mu.Lock()
	got := seen["o-3"]
	mu.Unlock()
	if got == nil || got.Source != "orders" || got.EventID != "o-3" || string(got.Key) != "k-1" ||
		string(got.Payload) != `{"id":1}` || got.Headers["traceparent"] != "00-x" || got.Headers["é"] != "ü" || got.Attempt != 1 {
		t.Fatalf("the handler got %+v", got)
	}
}

// Work gives each outcome a handler can have, and a transactional
// handler's writes commit with the row, or not at all.
func TestWorkOutcomes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(context.Background(), `CREATE TABLE shipments (order_id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	reg := handlers.NewRegistry()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(reg.HandleFunc("ok", func(context.Context, *handlers.Event) error { return nil }))
	must(reg.HandleFunc("poison", func(context.Context, *handlers.Event) error {
		return handlers.Permanent(errors.New("bad sku"))
	}))
	must(reg.HandleFunc("flaky", func(context.Context, *handlers.Event) error { return errors.New("upstream 503") }))
	ship := func(fail bool) handlers.TxHandlerFunc {
		return func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
			if _, err := tx.Exec(ctx, `INSERT INTO shipments VALUES ($1)`, ev.EventID); err != nil {
				return err
			}
			if fail {
				return errors.New("after the write")
			}
			return nil
		}
	}
	must(reg.HandleTx("ship", ship(false)))
	must(reg.HandleTx("ship.fails", ship(true)))

	for _, tt := range []struct {
		eventType string
		want      handlertest.Outcome
		shipped   bool
	}{
		{"ok", handlertest.Outcome{Status: handlertest.Processed, Attempts: 1}, false},
		{"poison", handlertest.Outcome{Status: handlertest.Dead, Attempts: 1, LastError: "bad sku"}, false},
		{"flaky", handlertest.Outcome{Status: handlertest.Received, Attempts: 1, LastError: "upstream 503"}, false},
		{"unrouted", handlertest.Outcome{Status: handlertest.Dead, Attempts: 1, LastError: "unrouted"}, false},
		{"ship", handlertest.Outcome{Status: handlertest.Processed, Attempts: 1}, true},
		{"ship.fails", handlertest.Outcome{Status: handlertest.Received, Attempts: 1, LastError: "after the write"}, false},
	} {
		id := "e-" + tt.eventType
		out := handlertest.Work(t, db.Pool, reg, handlertest.Row{Source: "test", EventID: id, EventType: tt.eventType})
		if out.Status != tt.want.Status || out.Attempts != tt.want.Attempts || !strings.Contains(out.LastError, tt.want.LastError) ||
			(tt.want.LastError == "" && out.LastError != "") {
			t.Errorf("%s: Work = %+v, want %+v", tt.eventType, out, tt.want)
		}
		var shipped bool
		must(db.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM shipments WHERE order_id = $1)`, id).Scan(&shipped))
		if shipped != tt.shipped {
			t.Errorf("%s: shipment written = %v, want %v", tt.eventType, shipped, tt.shipped)
		}
	}
}

// fatalT records the first Fatalf of a helper under test and ends its
// goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// WaitFor fails the test, saying what it saw, when the outcome never
// comes; and when there is no row at all.
func TestWaitForFailsAfterItsTimeout(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	if _, err := handlertest.Insert(context.Background(), db.Pool, handlertest.Row{Source: "s", EventID: "e", EventType: "x"}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ eventID, want string }{
		{"e", "row s/e after 50ms: {Status:received Attempts:0 LastError:}"},
		{"missing", "no row s/missing after 50ms"},
	} {
		ft := &fatalT{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			handlertest.WaitFor(ft, db.Pool, "s", tt.eventID, 50*time.Millisecond, handlertest.Outcome.Attempted)
		}()
		<-done
		if !strings.Contains(ft.msg, tt.want) {
			t.Errorf("WaitFor on %s failed with %q, want %q", tt.eventID, ft.msg, tt.want)
		}
	}
}
