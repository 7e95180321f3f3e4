package kafka

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/ingesttest"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// inboxRow is a row as read back from the inbox table.
type inboxRow = ingesttest.InboxRow

var readRows = ingesttest.ReadRows

func TestPgWriterWriteBatch(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	w := ingestcore.PGWriter{Pool: db.Pool}
	opts := ingest.DefaultMapOptions()

	binary := []byte{0, 'a', 0xff, 0, 0xc3}
	rows := []ingestcore.Row{
		kafkamap.MapMessage(kafka.Message{Topic: "orders", Partition: 1, Offset: 10, Key: []byte("k"), Value: binary,
			Headers: []kafka.Header{{Key: "event_id", Value: []byte("e1")}, {Key: "event_type", Value: []byte("order.created")},
				{Key: "bin", Value: []byte{0, 1}}}}, opts),
		kafkamap.MapMessage(kafka.Message{Topic: "orders", Partition: 1, Offset: 11, Value: []byte("{}"),
			Headers: []kafka.Header{{Key: "event_type", Value: []byte("order.created")}}}, opts),
		// Same event id as the first row, in the same statement: skipped.
		kafkamap.MapMessage(kafka.Message{Topic: "orders", Partition: 2, Offset: 3, Value: []byte("again"),
			Headers: []kafka.Header{{Key: "event_id", Value: []byte("e1")}, {Key: "event_type", Value: []byte("order.created")}}}, opts),
		// Same event id from another source: a different event.
		kafkamap.MapMessage(kafka.Message{Topic: "payments", Partition: 0, Offset: 0, Key: []byte{},
			Headers: []kafka.Header{{Key: "event_id", Value: []byte("e1")}, {Key: "event_type", Value: []byte("payment.done")}}}, opts),
	}
	n, err := w.WriteBatch(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("inserted = %d, want 3", n)
	}
	n, err = w.WriteBatch(ctx, rows)
	if err != nil || n != 0 {
		t.Errorf("writing the batch again: inserted %d, err %v; want 0, nil", n, err)
	}

	got := readRows(t, db)
	if len(got) != 3 {
		t.Fatalf("%d rows, want 3: %v", len(got), got)
	}
	e1 := got["orders e1"]
	if e1.Status != "received" || e1.EventType != "order.created" || !bytes.Equal(e1.Key, []byte("k")) ||
		!bytes.Equal(e1.Payload, binary) || e1.LastError != nil || e1.Attempts != 0 ||
		*e1.Topic != "orders" || *e1.Partition != 1 || *e1.Offset != 10 {
		t.Errorf("row e1 = %+v", e1)
	}
	if e1.Headers["event_id"] != "e1" || e1.Headers["bin"].(map[string]any)["base64"] != "AAE=" {
		t.Errorf("row e1 headers = %v", e1.Headers)
	}
	rej := got["orders orders/1/11"]
	if rej.Status != "rejected" || rej.EventType != "order.created" || rej.Key != nil ||
		rej.LastError == nil || *rej.LastError != "missing event id (headers event_id, ce_id)" || *rej.Offset != 11 {
		t.Errorf("rejected row = %+v", rej)
	}
	pay := got["payments e1"]
	if pay.Key == nil || len(pay.Key) != 0 || pay.Payload == nil || len(pay.Payload) != 0 {
		t.Errorf("payments row: key %v (want empty, not NULL), payload %v (want empty)", pay.Key, pay.Payload)
	}
}

// A row the database refuses (here a NUL byte in a text column, which
// MapMessage would have rejected) is replaced by a rejected placeholder; the
// rest of the batch is written.
func TestRefusedRowBecomesPlaceholder(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c, err := openKafka(Config{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, Group: "g"},
		db.Pool, zerolog.New(zerolog.NewTestWriter(t)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	good := func(off int64, id string) ingestcore.Row {
		return kafkamap.MapMessage(kafka.Message{Topic: "t", Offset: off, Value: []byte("v"),
			Headers: []kafka.Header{{Key: "event_id", Value: []byte(id)}, {Key: "event_type", Value: []byte("x")}}}, c.cfg.Mapping)
	}
	bad := good(1, "bad")
	bad.EventType = "nul\x00type"
	rows := []ingestcore.Row{good(0, "a"), bad, good(2, "b")}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := c.Write(ctx, rows)
	if err != nil || n != 3 {
		t.Fatalf("write = %d, %v; want 3, nil", n, err)
	}
	if rows[1].Reason != ingestcore.RejectRefused {
		t.Errorf("refused row not replaced in the batch: %+v", rows[1])
	}
	got := readRows(t, db)
	ph, ok := got["t t/0/1"]
	if !ok || ph.Status != "rejected" || ph.LastError == nil || !bytes.Equal(ph.Payload, []byte("v")) {
		t.Fatalf("placeholder = %+v (found %t); rows %v", ph, ok, got)
	}
	// It keeps what the message carried, so it can be requeued once fixed.
	if ph.Headers["event_id"] != "bad" || ph.Headers["event_type"] != "x" {
		t.Errorf("placeholder headers = %v, want the message's", ph.Headers)
	}
	t.Logf("placeholder last_error: %s", *ph.LastError)
	if _, ok := got["t a"]; !ok {
		t.Error("row a missing")
	}
	if _, ok := got["t b"]; !ok {
		t.Error("row b missing")
	}
}

// Reproduction from the bug report: a third party inserted rows with
// explicit ids (id is GENERATED BY DEFAULT), and 164 of the 1,000 Kafka
// events that followed became rejected placeholders with "duplicate key
// value violates unique constraint inbox_pkey". A primary-key clash says
// nothing about the message: every event must be stored as itself.
func TestIdentityClashRejectsNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	// Explicit ids scattered ahead of the identity sequence.
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO inbox (id, source, event_id, event_type)
		SELECT g * 6, 'third-party', 'tp-' || g, 'x' FROM generate_series(1, 164) g`); err != nil {
		t.Fatal(err)
	}
	c, err := openKafka(Config{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, Group: "g"},
		db.Pool, zerolog.New(zerolog.NewTestWriter(t)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c.Backoff = func(int) time.Duration { return time.Millisecond }
	for batch := range 4 {
		rows := make([]ingestcore.Row, 250)
		for i := range rows {
			off := int64(batch*250 + i)
			rows[i] = kafkamap.MapMessage(kafka.Message{Topic: "t", Offset: off, Value: []byte("v"), Headers: []kafka.Header{
				{Key: "event_id", Value: []byte(fmt.Sprintf("e-%d", off))}, {Key: "event_type", Value: []byte("x")}}}, c.cfg.Mapping)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := c.Write(wctx, rows)
		cancel()
		if err != nil || n != len(rows) {
			t.Fatalf("batch %d: write = %d, %v; want %d, nil", batch, n, err, len(rows))
		}
	}
	var received, rejected int
	if err := db.Pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE status = 'received'), count(*) FILTER (WHERE status = 'rejected')
		FROM inbox WHERE source = 't'`).Scan(&received, &rejected); err != nil {
		t.Fatal(err)
	}
	if received != 1000 || rejected != 0 {
		t.Fatalf("received %d, rejected %d; want 1000 events stored as themselves", received, rejected)
	}
}
