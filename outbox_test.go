package inboxd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	amqpsource "github.com/inboxd/inboxd/ingest/amqp"
	"github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
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

// rolledBackTx is a transaction on a database of the test's own, rolled
// back when the test ends.
func rolledBackTx(t *testing.T) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pgtest.New(t).Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx
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
	ctx := context.Background()
	tx := rolledBackTx(t)
	_, err := inboxd.Emit(ctx, tx,
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

// Emit refuses, with the reason, a message its destination's broker
// cannot carry, rules its broker's client would break on at publication:
// an AMQP message_id over a shortstr's 255 bytes, a NATS header name with
// a space, a NATS header value with a line break (nats.go would change
// it), an AMQP expiration that is not a number of milliseconds. The same
// header names and ids are fine where the broker carries them.
func TestEmitRefusesWhatItsBrokerCannotCarry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := rolledBackTx(t)
	long := strings.Repeat("x", 300)
	_, err := inboxd.Emit(ctx, tx,
		inboxd.OutboxMessage{Destination: "amqp:events/rk", EventType: "x", EventID: long},
		inboxd.OutboxMessage{Destination: "nats:orders", EventType: "x", Headers: map[string]string{"bad name": "v"}},
		inboxd.OutboxMessage{Destination: "nats:orders", EventType: "x", Headers: map[string]string{"note": "two\nlines"}},
		inboxd.OutboxMessage{Destination: "amqp:events/rk", EventType: "x", Headers: map[string]string{"expiration": "soon"}},
	)
	if err == nil {
		t.Fatal("Emit accepted messages their brokers cannot carry")
	}
	for _, want := range []string{"message 0: amqp: message_id", "255", `message 1: nats: header name "bad name"`,
		`message 2: nats: header note`, `message 3: amqp: header expiration "soon"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := inboxd.Emit(ctx, tx,
		inboxd.OutboxMessage{Destination: "kafka:orders", EventType: "x", EventID: long, Headers: map[string]string{"bad name": "two\nlines"}},
		inboxd.OutboxMessage{Destination: "amqp:events/rk", EventType: "x", Headers: map[string]string{"bad name": "v", "expiration": "60000"}},
	); err != nil {
		t.Errorf("Emit refused what Kafka and RabbitMQ carry: %v", err)
	}
}

// The round trip outbox → RabbitMQ → inboxd's own AMQP ingest → inbox row:
// the row stored downstream has the event id, type, key and payload
// emitted, and every header emitted with its value, the standard
// properties' headers (content-type, content-encoding, correlation-id,
// reply-to, expiration, timestamp) carried as the AMQP properties and read
// back from them.
func TestOutboxAMQPRoundTripThroughIngest(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	conn, err := amqp.Dial(testkit.AMQPURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	queue := "inboxd-test-outbox-round-trip-" + hex.EncodeToString(suffix[:])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", queue, err)
		}
	})

	cfg := testConfig(db.Pool, handlers.NewRegistry(), zerolog.Nop())
	cfg.Sources = []source.Source{amqpsource.New(amqpsource.Config{URL: testkit.AMQPURL(), Queues: []string{queue}})}
	cfg.Outbox = &inboxd.OutboxConfig{PollInterval: 10 * time.Millisecond, Publishers: []source.Publisher{amqpsource.Publisher(amqpsource.Config{URL: testkit.AMQPURL()})}}
	ib, err := inboxd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start(t, ib)

	headers := map[string]string{
		"content-type": "application/json", "content-encoding": "identity", "correlation-id": "corr-7",
		"reply-to": "replies", "expiration": "600000", "timestamp": "2024-05-01T10:00:00Z", "tenant": "acme",
	}
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inboxd.Emit(ctx, tx, inboxd.OutboxMessage{Destination: "amqp:/" + queue, EventType: "order.shipped",
		EventID: "round-trip-1", Key: "order-7", Headers: headers, Payload: []byte(`{"id":7}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var eventType string
	var key, payload []byte
	var stored map[string]any
	waitFor(t, 20*time.Second, "the emitted event stored by the AMQP source", func() bool {
		err := db.Pool.QueryRow(ctx, `SELECT event_type, key, payload, headers FROM inbox WHERE source = $1 AND event_id = 'round-trip-1'`,
			queue).Scan(&eventType, &key, &payload, &stored)
		return err == nil
	})
	if eventType != "order.shipped" || string(key) != "order-7" || string(payload) != `{"id":7}` {
		t.Errorf("inbox row: type %q, key %q, payload %q", eventType, key, payload)
	}
	for k, v := range headers {
		if stored[k] != v {
			t.Errorf("inbox row header %s = %v, want %q (headers %v)", k, stored[k], v, stored)
		}
	}
}
