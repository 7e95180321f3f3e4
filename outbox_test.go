package inboxd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/pgtest"
)

type outboxRow struct {
	destination, eventID, eventType, key, status string
	headers                                      map[string]string
	payload                                      []byte
}

func outboxRows(t *testing.T, db *pgtest.DB) []outboxRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT destination, event_id, event_type, coalesce(key, ''), status, headers, payload FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		return o, r.Scan(&o.destination, &o.eventID, &o.eventType, &o.key, &o.status, &o.headers, &o.payload)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Emit writes in the caller's transaction: nothing before the commit,
// nothing after a rollback, the messages in their order after a commit,
// with the writer's trace context.
func TestEmitWritesInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inboxd.Emit(ctx, tx, inboxd.OutboxMessage{Destination: "kafka:t", EventType: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(outboxRows(t, db)); n != 0 {
		t.Fatalf("%d rows after a rollback", n)
	}

	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled,
	})
	sctx := trace.ContextWithSpanContext(ctx, sc)
	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := inboxd.Emit(sctx, tx,
		inboxd.OutboxMessage{Destination: "kafka:orders", EventType: "order.shipped", Key: "order-7", Payload: []byte(`{"id": 7}`),
			Headers: map[string]string{"tenant": "acme"}},
		inboxd.OutboxMessage{Destination: "amqp:events/order.shipped", EventType: "order.shipped", EventID: "mine", Key: "order-7"},
		inboxd.OutboxMessage{Destination: "nats:orders.shipped", EventType: "order.shipped"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(outboxRows(t, db)) != 0 {
		t.Fatal("rows visible before the commit")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows := outboxRows(t, db)
	if len(rows) != 3 || len(ids) != 3 {
		t.Fatalf("%d rows, %d ids; want 3", len(rows), len(ids))
	}
	if rows[0].destination != "kafka:orders" || rows[1].eventID != "mine" || rows[2].destination != "nats:orders.shipped" {
		t.Errorf("rows out of order: %+v", rows)
	}
	for i, r := range rows {
		if r.eventID != ids[i] || r.eventID == "" || r.status != "pending" {
			t.Errorf("row %d: event id %q status %s, Emit said %q", i, r.eventID, r.status, ids[i])
		}
	}
	if rows[0].headers["tenant"] != "acme" || string(rows[0].payload) != `{"id": 7}` || rows[0].key != "order-7" {
		t.Errorf("row 0 = %+v", rows[0])
	}
	want := "00-01020300000000000000000000000000-0405000000000000-01"
	if got := rows[0].headers["traceparent"]; got != want {
		t.Errorf("traceparent = %q, want %q", got, want)
	}
}

// Emit refuses what the relay could never publish, naming each problem.
func TestEmitRefusesBadMessages(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = inboxd.Emit(ctx, tx,
		inboxd.OutboxMessage{Destination: "kafka:bad topic", EventType: "x"},
		inboxd.OutboxMessage{Destination: "smtp:x", EventType: "x"},
		inboxd.OutboxMessage{Destination: "nats:a.*", EventType: "x"},
		inboxd.OutboxMessage{Destination: "kafka:t"},
		inboxd.OutboxMessage{Destination: "kafka:t", EventType: "x", Headers: map[string]string{"event_id": "no"}},
	)
	if err == nil {
		t.Fatal("Emit accepted bad messages")
	}
	for _, want := range []string{"message 0", "message 1", "message 2", "message 3: no event type", `message 4: header "event_id"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// Consume, process, produce: a transactional handler's writes and the
// event it emits commit with its row's outcome; a handler that fails emits
// nothing.
func TestTxHandlerEmitsWithItsWrites(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE shipments (event_id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	reg := handlers.NewRegistry()
	if err := reg.HandleTx("order.paid", handlers.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shipments VALUES ($1)`, ev.EventID); err != nil {
			return err
		}
		if _, err := inboxd.Emit(ctx, tx, inboxd.OutboxMessage{
			Destination: "kafka:shipments", EventType: "order.shipped", EventID: "shipped-" + ev.EventID, Key: ev.EventID,
		}); err != nil {
			return err
		}
		if ev.EventID == "fails" {
			return handlers.Permanent(errors.New("no stock"))
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	ib, err := inboxd.New(testConfig(db.Pool, reg, zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	start(t, ib)
	insert(t, db.Pool, "order.paid", "ok")
	insert(t, db.Pool, "order.paid", "fails")
	waitFor(t, 10*time.Second, "both rows done", func() bool {
		a, _ := rowState(t, db.Pool, "ok")
		b, _ := rowState(t, db.Pool, "fails")
		return a == "processed" && b == "dead"
	})
	rows := outboxRows(t, db)
	if len(rows) != 1 || rows[0].eventID != "shipped-ok" {
		t.Fatalf("outbox = %+v, want the successful handler's message alone", rows)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM shipments`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("shipments = %d (%v), want 1", n, err)
	}
}
