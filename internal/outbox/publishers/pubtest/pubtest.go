// Package pubtest holds what the tests of the outbox's publishers
// (kafkapub, amqppub, natspub) share: messages as the relay builds them,
// what a consumer read back, compared per key, the relay run on a test
// database, and the rows of the interop and poison tests. Only tests
// import it.
package pubtest

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

// Logger logs to t, from the info level.
func Logger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
}

// RandomName is prefix and 8 random hex digits: each test its own topic,
// exchange, queue or stream.
func RandomName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// RandomText is n random hex digits: a payload no compression shrinks
// much.
func RandomText(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// TraceParent is the writer's span every test message carries.
const TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Message is a message as the relay hands it over: its headers (a user
// header, traceparent) with event_id and event_type, sorted by name.
func Message(dest outbox.Destination, eventID, eventType, key string, payload []byte) outbox.Message {
	hs := []outbox.Header{
		{Key: outbox.EventIDHeader, Value: eventID},
		{Key: outbox.EventTypeHeader, Value: eventType},
		{Key: outbox.TraceParentHeader, Value: TraceParent},
		{Key: "tenant", Value: "acme"},
	}
	slices.SortFunc(hs, func(a, b outbox.Header) int { return strings.Compare(a.Key, b.Key) })
	return outbox.Message{Destination: dest, EventID: eventID, EventType: eventType, Key: key, Headers: hs, Payload: payload}
}

// OrderedBatches is n messages over keys keys, split in parts batches.
func OrderedBatches(dest outbox.Destination, n, keys, parts int) [][]outbox.Message {
	run := RandomName("")
	var all []outbox.Message
	for i := range n {
		m := Message(dest, fmt.Sprintf("e-%s-%03d", run, i), "order.shipped", fmt.Sprintf("order-%d", i%keys),
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

// Received is a message as a consumer read it back.
type Received struct {
	Key     string
	Headers map[string]string
	Payload []byte
	// Row is the message mapped by inboxd's own ingest.
	Row ingestcore.Row
}

// PublishAll publishes each batch in turn and fails t on any error.
func PublishAll(t testing.TB, p outbox.Publisher, batches [][]outbox.Message) {
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

// CheckReceived compares what was read back with what was sent: per key,
// the same event ids in the same order; each message's headers (event_id,
// event_type, traceparent, the user's) and payload intact; the row
// inboxd's ingest maps it to with the same event id, type and key.
func CheckReceived(t testing.TB, batches [][]outbox.Message, got []Received) {
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
		id := r.Headers[outbox.EventIDHeader]
		m, ok := byID[id]
		if !ok {
			t.Fatalf("read back a message with event_id %q, never sent", id)
		}
		gotOrder[r.Key] = append(gotOrder[r.Key], id)
		for _, h := range m.Headers {
			if r.Headers[h.Key] != h.Value {
				t.Errorf("%s: header %s = %q, want %q", id, h.Key, r.Headers[h.Key], h.Value)
			}
		}
		if string(r.Payload) != string(m.Payload) {
			t.Errorf("%s: payload %q, want %q", id, r.Payload, m.Payload)
		}
		if r.Row.Status != ingestcore.StatusReceived || r.Row.EventID != m.EventID || r.Row.EventType != m.EventType || string(r.Row.Key) != m.Key {
			t.Errorf("%s: ingest maps it to status %s, event id %q, type %q, key %q (%s); want %q, %q, %q",
				id, r.Row.Status, r.Row.EventID, r.Row.EventType, r.Row.Key, r.Row.LastError, m.EventID, m.EventType, m.Key)
		}
	}
	for k, want := range wantOrder {
		if !slices.Equal(gotOrder[k], want) {
			t.Errorf("key %s: read back in the order %v, want %v", k, gotOrder[k], want)
		}
	}
}

// PublishOne publishes m alone within timeout and returns how long Publish
// took and m's error.
func PublishOne(p outbox.Publisher, m outbox.Message, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, []outbox.Message{m})
	return time.Since(start), errs[0]
}

// WantRefused fails t unless err wraps ErrRefused.
func WantRefused(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, outbox.ErrRefused) {
		t.Errorf("%s: got %v, want an error wrapping outbox.ErrRefused", what, err)
	}
}

// WantUnencodableThenNext publishes bad and next in one call and fails t
// unless bad is refused as unencodable and next is acknowledged.
func WantUnencodableThenNext(t testing.TB, p outbox.Publisher, bad, next outbox.Message) {
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

// WantTransient fails t unless err is an error that does not wrap
// ErrRefused, returned within the deadline (plus a little).
func WantTransient(t testing.TB, what string, err error, took, deadline time.Duration) {
	t.Helper()
	if err == nil || errors.Is(err, outbox.ErrRefused) {
		t.Errorf("%s: got %v, want an error not wrapping outbox.ErrRefused", what, err)
	}
	if took > deadline+time.Second {
		t.Errorf("%s: Publish took %s, past its %s deadline", what, took, deadline)
	}
}

// HeaderMap is hs as a map, the last value of a repeated name winning.
func HeaderMap[H any](hs []H, kv func(H) (string, string)) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		k, v := kv(h)
		m[k] = v
	}
	return m
}

// ErrString is err's text, "none" for nil.
func ErrString(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}
