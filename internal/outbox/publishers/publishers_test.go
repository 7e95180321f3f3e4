package publishers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/outbox"
)

// The publishers' tests share these helpers: messages as the relay builds
// them, and what a consumer read back, compared per key.

func pubLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
}

// randomName is prefix and 8 random hex digits: each test its own topic,
// exchange, queue or stream.
func randomName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// randomText is n random hex digits: a payload no compression shrinks
// much.
func randomText(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// testTraceParent is the writer's span every test message carries.
const testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// testMessage is a message as the relay hands it over: its headers (a user
// header, traceparent) with event_id and event_type, sorted by name.
func testMessage(dest outbox.Destination, eventID, eventType, key string, payload []byte) outbox.Message {
	hs := []outbox.Header{
		{Key: outbox.EventIDHeader, Value: eventID},
		{Key: outbox.EventTypeHeader, Value: eventType},
		{Key: outbox.TraceParentHeader, Value: testTraceParent},
		{Key: "tenant", Value: "acme"},
	}
	slices.SortFunc(hs, func(a, b outbox.Header) int { return strings.Compare(a.Key, b.Key) })
	return outbox.Message{Destination: dest, EventID: eventID, EventType: eventType, Key: key, Headers: hs, Payload: payload}
}

// orderedBatches is n messages over keys keys, split in parts batches.
func orderedBatches(dest outbox.Destination, n, keys, parts int) [][]outbox.Message {
	run := randomName("")
	var all []outbox.Message
	for i := range n {
		m := testMessage(dest, fmt.Sprintf("e-%s-%03d", run, i), "order.shipped", fmt.Sprintf("order-%d", i%keys),
			fmt.Appendf(nil, `{"n":%d}`, i))
		m.ID = int64(i + 1)
		all = append(all, m)
	}
	var out [][]outbox.Message
	size := (n + parts - 1) / parts
	for len(all) > 0 {
		k := min(size, len(all))
		out = append(out, all[:k])
		all = all[k:]
	}
	return out
}

// received is a message as a consumer read it back.
type received struct {
	key     string
	headers map[string]string
	payload []byte
	// row is the message mapped by inboxd's own ingest.
	row ingestcore.Row
}

// publishAll publishes each batch in turn and fails t on any error.
func publishAll(t testing.TB, p outbox.Publisher, batches [][]outbox.Message) {
	t.Helper()
	for _, b := range batches {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs := p.Publish(ctx, b)
		cancel()
		if len(errs) != len(b) {
			t.Fatalf("Publish returned %d errors for %d messages", len(errs), len(b))
		}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("message %d (%s): %v", i, b[i].EventID, err)
			}
		}
	}
}

// checkReceived compares what was read back with what was sent: per key,
// the same event ids in the same order; each message's headers (event_id,
// event_type, traceparent, the user's) and payload intact; the row
// inboxd's ingest maps it to with the same event id, type and key.
func checkReceived(t testing.TB, batches [][]outbox.Message, got []received) {
	t.Helper()
	sent := slices.Concat(batches...)
	if len(got) != len(sent) {
		t.Fatalf("read back %d messages, want %d", len(got), len(sent))
	}
	byID := map[string]outbox.Message{}
	wantOrder := map[string][]string{}
	for _, m := range sent {
		byID[m.EventID] = m
		wantOrder[m.Key] = append(wantOrder[m.Key], m.EventID)
	}
	gotOrder := map[string][]string{}
	for _, r := range got {
		id := r.headers[outbox.EventIDHeader]
		m, ok := byID[id]
		if !ok {
			t.Fatalf("read back a message with event_id %q, never sent", id)
		}
		gotOrder[r.key] = append(gotOrder[r.key], id)
		for _, h := range m.Headers {
			if r.headers[h.Key] != h.Value {
				t.Errorf("%s: header %s = %q, want %q", id, h.Key, r.headers[h.Key], h.Value)
			}
		}
		if string(r.payload) != string(m.Payload) {
			t.Errorf("%s: payload %q, want %q", id, r.payload, m.Payload)
		}
		if r.row.Status != ingestcore.StatusReceived || r.row.EventID != m.EventID || r.row.EventType != m.EventType || string(r.row.Key) != m.Key {
			t.Errorf("%s: ingest maps it to status %s, event id %q, type %q, key %q (%s); want %q, %q, %q",
				id, r.row.Status, r.row.EventID, r.row.EventType, r.row.Key, r.row.LastError, m.EventID, m.EventType, m.Key)
		}
	}
	for k, want := range wantOrder {
		if !slices.Equal(gotOrder[k], want) {
			t.Errorf("key %s: read back in the order %v, want %v", k, gotOrder[k], want)
		}
	}
}

// publishOne publishes m alone within timeout and returns how long Publish
// took and m's error.
func publishOne(p outbox.Publisher, m outbox.Message, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, []outbox.Message{m})
	return time.Since(start), errs[0]
}

// wantRefused fails t unless err wraps ErrRefused.
func wantRefused(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, outbox.ErrRefused) {
		t.Errorf("%s: got %v, want an error wrapping outbox.ErrRefused", what, err)
	}
}

// wantUnencodableThenNext publishes bad and next in one call and fails t
// unless bad is refused as unencodable and next is acknowledged.
func wantUnencodableThenNext(t testing.TB, p outbox.Publisher, bad, next outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := p.Publish(ctx, []outbox.Message{bad, next})
	if !errors.Is(errs[0], outbox.ErrUnencodable) {
		t.Errorf("Publish of %.20s: %v, want unencodable", bad.EventID, errs[0])
	}
	if errs[1] != nil {
		t.Errorf("the message after it: %v", errs[1])
	}
}

// wantTransient fails t unless err is an error that does not wrap
// ErrRefused, returned within the deadline (plus a little).
func wantTransient(t testing.TB, what string, err error, took, deadline time.Duration) {
	t.Helper()
	if err == nil || errors.Is(err, outbox.ErrRefused) {
		t.Errorf("%s: got %v, want an error not wrapping outbox.ErrRefused", what, err)
	}
	if took > deadline+time.Second {
		t.Errorf("%s: Publish took %s, past its %s deadline", what, took, deadline)
	}
}

// headerMap is hs as a map, the last value of a repeated name winning.
func headerMap[H any](hs []H, kv func(H) (string, string)) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		k, v := kv(h)
		m[k] = v
	}
	return m
}

// errString is err's text, "none" for nil.
func errString(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}
