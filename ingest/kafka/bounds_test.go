package kafka

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// Headers over MapOptions.MaxHeaders (their names and values, in bytes)
// make the message a rejected row that names the size and the bound; the
// headers are not stored, what else fits its bound is (the payload, the
// key, the type found in the headers). Headers at the bound are kept.
func TestOversizeHeadersAreRejected(t *testing.T) {
	t.Parallel()
	opts := ingest.MapOptions{MaxHeaders: 1024}
	trace := string(bytes.Repeat([]byte("t"), 2000))
	m := kafka.Message{Topic: "orders", Partition: 1, Offset: 7, Key: []byte("k"), Value: []byte("v"),
		Headers: hdrs("event_id", "e1", "event_type", "order.created", "trace", trace)}
	got := kafkamap.MapMessage(m, opts)
	const size = len("event_id") + len("e1") + len("event_type") + len("order.created") + len("trace") + 2000
	want := fmt.Sprintf("headers of %d bytes exceed INBOXD_MAX_HEADERS (1024)", size)
	if got.Status != ingestcore.StatusRejected || got.Reason != ingestcore.RejectOversize || got.LastError != want ||
		got.EventID != "orders/1/7" || got.EventType != "order.created" {
		t.Errorf("row = %s %s %q %q %q, want rejected oversize orders/1/7 order.created %q",
			got.Status, got.Reason, got.EventID, got.EventType, got.LastError, want)
	}
	if string(got.Headers) != "{}" || !bytes.Equal(got.Payload, []byte("v")) || !bytes.Equal(got.Key, []byte("k")) {
		t.Errorf("stored headers %d bytes, payload %q, key %q; want {}, v, k", len(got.Headers), got.Payload, got.Key)
	}

	// Exactly at the bound: kept.
	fits := hdrs("event_id", "e1", "event_type", "t", "pad", "")
	pad := 1024 - len("event_id") - len("e1") - len("event_type") - len("t") - len("pad")
	fits[2].Value = bytes.Repeat([]byte("p"), pad)
	if got := kafkamap.MapMessage(kafka.Message{Value: []byte("v"), Headers: fits}, opts); got.Status != ingestcore.StatusReceived {
		t.Errorf("headers of exactly 1024 bytes: %s %q, want received", got.Status, got.LastError)
	}
	// Both the payload and the headers over their bounds: both named.
	got = kafkamap.MapMessage(kafka.Message{Topic: "orders", Value: bytes.Repeat([]byte("x"), 2048), Headers: m.Headers},
		ingest.MapOptions{MaxHeaders: 1024, MaxPayload: 1024})
	if sum := sha256.Sum256(bytes.Repeat([]byte("x"), 2048)); got.LastError !=
		"payload of 2048 bytes exceeds INBOXD_MAX_PAYLOAD (1024); sha256="+hex.EncodeToString(sum[:])+"; "+want {
		t.Errorf("payload and headers over their bounds: %q", got.LastError)
	}
	if d := ingest.DefaultMapOptions().MaxHeaders; d != ingest.DefaultMaxHeaders {
		t.Errorf("default MaxHeaders = %d, want DefaultMaxHeaders (%d)", d, ingest.DefaultMaxHeaders)
	}
}

// Reproduction from the reliability report: a 10 MB key was stored in full
// although INBOXD_MAX_PAYLOAD is 1 MiB. A key over MaxKeyBytes makes the
// message a rejected row whose last_error names the size, the bound and the
// key's SHA-256; the key is not stored. A key at the bound (such as the
// report's 3,000-byte one) is kept.
func TestOversizeKeysAreRejected(t *testing.T) {
	t.Parallel()
	for _, n := range []int{ingest.MaxKeyBytes + 1, 10 << 20} {
		key := bytes.Repeat([]byte("k"), n)
		sum := sha256.Sum256(key)
		got := kafkamap.MapMessage(kafka.Message{Topic: "orders", Offset: 3, Key: key, Value: []byte("v"),
			Headers: hdrs("event_id", "e1", "event_type", "t")}, ingest.MapOptions{})
		want := fmt.Sprintf("key of %d bytes exceeds the limit of %d bytes; sha256=%s", n, ingest.MaxKeyBytes, hex.EncodeToString(sum[:]))
		if got.Status != ingestcore.StatusRejected || got.Reason != ingestcore.RejectOversize || got.LastError != want || got.EventID != "orders/0/3" {
			t.Errorf("key of %d bytes: %s %s %q %q, want rejected oversize orders/0/3 %q", n, got.Status, got.Reason, got.EventID, got.LastError, want)
		}
		if got.Key != nil {
			t.Errorf("key of %d bytes: %d bytes of it stored, want none", n, len(got.Key))
		}
	}
	if ingest.MaxKeyBytes < 3000 {
		t.Fatalf("MaxKeyBytes = %d: the report's 3,000-byte key must fit", ingest.MaxKeyBytes)
	}
	key := bytes.Repeat([]byte("k"), ingest.MaxKeyBytes)
	if got := kafkamap.MapMessage(kafka.Message{Key: key, Headers: hdrs("event_id", "e1", "event_type", "t")}, ingest.MapOptions{}); got.Status != ingestcore.StatusReceived || !bytes.Equal(got.Key, key) {
		t.Errorf("key of exactly %d bytes: %s %q, want received with its key", ingest.MaxKeyBytes, got.Status, got.LastError)
	}
}

// Reproduction from the reliability report: a message with a 3,000-byte key
// became a rejected placeholder (index row size 3032 exceeds btree version
// 4 maximum 2704 for index "inbox_key_idx", SQLSTATE 54000). It is stored
// as the event it is, key included.
func TestLongKeyIsStored(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c, run := unitConsumer(t, ingestcore.PGWriter{Pool: db.Pool}, newFakeReader(), nil)
	_ = run
	key := make([]byte, 3000) // random: a B-tree compresses a repetitive key
	_, _ = rand.NewChaCha8([32]byte{3}).Read(key)
	rows := []ingestcore.Row{kafkamap.MapMessage(kafka.Message{Topic: "t", Offset: 1, Key: key, Value: []byte("v"),
		Headers: hdrs("event_id", "long-key", "event_type", "x")}, c.cfg.Mapping)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Write(ctx, rows); err != nil {
		t.Fatal(err)
	}
	got, ok := readRows(t, db)["t long-key"]
	if !ok || got.Status != "received" || !bytes.Equal(got.Key, key) {
		var why string
		for _, r := range readRows(t, db) {
			if r.LastError != nil {
				why = *r.LastError
			}
		}
		t.Fatalf("row with a 3,000-byte key: found %t, status %q, key of %d bytes; last_error %q", ok, got.Status, len(got.Key), why)
	}
}

// Reproduction from the reliability report: an ingest batch of 500
// messages with ~1 MB of headers each held 488 MiB against a 16 MiB bound,
// since only payloads were counted. A batch counts key, payload and headers:
// with a 4 MiB bound, messages of 900 KiB of headers close a batch after
// five of them.
func TestBatchBytesCountKeyAndHeaders(t *testing.T) {
	t.Parallel()
	w := &fakeWriter{}
	r := newFakeReader()
	_, run := unitConsumer(t, w, r, func(c *Config) {
		c.BatchSize, c.BatchBytes, c.BatchTimeout = 500, 4<<20, 200*time.Millisecond
		c.Mapping.MaxHeaders = 1 << 20
	})
	trace := string(bytes.Repeat([]byte("t"), 900<<10))
	const n = 12
	for i := range n {
		m := msg(0, int64(i), fmt.Sprintf("e%d", i))
		m.Headers = append(m.Headers, kafka.Header{Key: "trace", Value: []byte(trace)})
		r.msgs <- m
	}
	stop := run()
	waitFor(t, 10*time.Second, func() (bool, string) {
		_, stored := w.snapshot()
		return stored == n, fmt.Sprintf("%d of %d rows written", stored, n)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	attempts, _ := w.snapshot()
	for i, a := range attempts {
		// The message that reaches the bound is the batch's last.
		if len(a) > 5 {
			t.Errorf("batch %d held %d messages of 900 KiB of headers (%d KiB), bound 4 MiB", i, len(a), len(a)*900)
		}
	}
}

// From outside, as the reliability report did it: messages with tiny
// payloads and 900 KB of headers each, through Kafka (kfake), with a
// payload bound of 1 KiB, so the reader's fetches are far smaller than one
// message. Each becomes a rejected row that names its headers' size, its
// headers not stored; the offsets are committed (the partition goes on),
// and the well-formed messages around them are stored as events.
func TestHeadersOverTheBoundThroughKafka(t *testing.T) {
	t.Parallel()
	b := setupKafka(t, 1)
	trace := bytes.Repeat([]byte("t"), 900_000)
	var recs []*kgo.Record
	for i := range 6 {
		big := b.event(0, fmt.Sprintf("big-%d", i), "order.created", []byte("v"))
		big.Headers = append(big.Headers, kgo.RecordHeader{Key: "trace", Value: trace})
		recs = append(recs, big, b.event(0, fmt.Sprintf("ok-%d", i), "order.created", []byte("v")))
	}
	for _, r := range recs {
		b.produce(t, r)
	}
	cfg := b.config()
	cfg.BatchBytes = 4 << 20
	b.start(t, cfg, "c1")
	b.waitCommitted(t, 30*time.Second)
	rows := readRows(t, b.db)
	if len(rows) != len(recs) {
		t.Fatalf("%d rows, want %d", len(rows), len(recs))
	}
	for i := range 6 {
		if r, ok := rows[fmt.Sprintf("orders ok-%d", i)]; !ok || r.Status != "received" {
			t.Errorf("ok-%d: %+v (found %t), want received", i, r.Status, ok)
		}
	}
	rejected := 0
	for _, r := range rows {
		if r.Status != "rejected" {
			continue
		}
		rejected++
		if r.LastError == nil || !strings.HasPrefix(*r.LastError, "headers of 900041 bytes exceed INBOXD_MAX_HEADERS (65536)") || len(r.Headers) != 0 {
			t.Errorf("rejected row %s: last_error %q, %d headers stored", r.EventID, deref(r.LastError), len(r.Headers))
		}
	}
	if rejected != 6 {
		t.Errorf("%d rejected rows, want 6", rejected)
	}
}
