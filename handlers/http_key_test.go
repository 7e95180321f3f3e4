package handlers_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/handlers"
)

// The reported case: rows (sql, "evt-7"), (sql, "evt-7 ") and
// (sql, "evt-7\t") are three rows, and each must reach the receiver with an
// Idempotency-Key and an Inbox-Event-Id of its own. Go's http.Header.Write
// trims leading and trailing blanks, which once made all three arrive as
// "sql/evt-7" and "evt-7", so a receiver deduplicating on the key dropped
// two real events.
func TestHTTPIdempotencyKeyKeepsBlanks(t *testing.T) {
	t.Parallel()
	for _, option := range []string{handlers.IdempotencyKeySourceEventID, handlers.IdempotencyKeyEventID} {
		t.Run(option, func(t *testing.T) {
			t.Parallel()
			b := setupHTTP(t, handlers.HTTPConfig{IdempotencyKey: option}, status(http.StatusOK, ""))
			keys, ids := map[string]string{}, map[string]string{}
			for _, id := range []string{"evt-7", "evt-7 ", "evt-7\t", "\tevt-7", " evt-7"} {
				ev := testEvent()
				ev.Source, ev.EventID = "sql", id
				if err := b.handler.Handle(context.Background(), ev); err != nil {
					t.Fatalf("Handle(%q): %v", id, err)
				}
				got := <-b.requests
				key, gotID := got.header.Get(handlers.HeaderIdempotencyKey), got.header.Get(handlers.HeaderEventID)
				if other, ok := keys[key]; ok {
					t.Errorf("rows (sql, %q) and (sql, %q) both sent Idempotency-Key %q", other, id, key)
				}
				keys[key] = id
				if other, ok := ids[gotID]; ok {
					t.Errorf("rows (sql, %q) and (sql, %q) both sent Inbox-Event-Id %q", other, id, gotID)
				}
				ids[gotID] = id
				want := handlers.IdempotencyKeyFor(ev)
				if option == handlers.IdempotencyKeyEventID {
					want = handlers.EscapeHeaderValue(id)
				}
				if key != want {
					t.Errorf("row (sql, %q): Idempotency-Key on the wire %q, computed %q", id, key, want)
				}
			}
			if _, ok := keys[map[string]string{
				handlers.IdempotencyKeySourceEventID: "sql/evt-7",
				handlers.IdempotencyKeyEventID:       "evt-7",
			}[option]]; !ok {
				t.Errorf("keys %q: the plain id evt-7 did not go out unchanged", keys)
			}
		})
	}
}

// An event id with a control character (a newline, which a header cannot
// carry) is sent percent-encoded instead of going dead.
func TestHTTPControlCharacterInEventID(t *testing.T) {
	t.Parallel()
	b := setupHTTP(t, handlers.HTTPConfig{}, status(http.StatusOK, ""))
	ev := testEvent()
	ev.EventID = "evt\n42"
	if err := b.handler.Handle(context.Background(), ev); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	got := <-b.requests
	if k, id := got.header.Get(handlers.HeaderIdempotencyKey), got.header.Get(handlers.HeaderEventID); k != "orders/evt%0A42" || id != "evt%0A42" {
		t.Fatalf("Idempotency-Key %q, Inbox-Event-Id %q; want orders/evt%%0A42, evt%%0A42", k, id)
	}
	if got.header.Get("42") != "" {
		t.Fatal("the event id's newline split the header")
	}
}

// wireValue is what a receiver reads of a header set to v: written with
// http.Header.Write, read back with net/textproto as Go's server does.
func wireValue(t *testing.T, v string) (string, bool) {
	t.Helper()
	var buf bytes.Buffer
	if err := (http.Header{handlers.HeaderIdempotencyKey: {v}}).Write(&buf); err != nil {
		t.Fatalf("Header.Write: %v", err)
	}
	buf.WriteString("\r\n")
	h, err := textproto.NewReader(bufio.NewReader(&buf)).ReadMIMEHeader()
	if err != nil {
		return "", false
	}
	got := h.Values(handlers.HeaderIdempotencyKey)
	if len(got) != 1 || len(h) != 1 {
		return "", false
	}
	return got[0], true
}

// unescape is the receiver's side of handlers.EscapeHeaderValue, written
// here independently: %XX becomes the byte 0xXX.
func unescape(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			t.Fatalf("%q: truncated escape at %d", s, i)
		}
		var v byte
		for _, c := range []byte(s[i+1 : i+3]) {
			switch {
			case c >= '0' && c <= '9':
				v = v<<4 | (c - '0')
			case c >= 'A' && c <= 'F':
				v = v<<4 | (c - 'A' + 10)
			default:
				t.Fatalf("%q: bad escape %q", s, s[i:i+3])
			}
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String()
}

// FuzzIdempotencyKey checks that the Idempotency-Key is injective over rows
// (two different (source, event id) pairs never share a key; the key decodes
// back to its row: the source up to the first "/", the event id after it),
// and that what goes on the wire is what was computed: the key, the escaped
// event id (Inbox-Event-Id and the bare-event-id key) and the escaped source
// survive http.Header.Write and a read with net/textproto unchanged. Plain
// ids (visible ASCII without "%") are sent as they are.
func FuzzIdempotencyKey(f *testing.F) {
	f.Add("sql", "evt-7", "sql", "evt-7 ")
	f.Add("sql", "evt-7", "sql", "evt-7\t")
	f.Add("sql", "\tevt-7", "sql", " evt-7")
	f.Add("a/b", "c", "a", "b/c")
	f.Add("50%/x", "id", "50%", "x/id")
	f.Add("orders", "a%20b", "orders", "a b")
	f.Add("", "/", "/", "")
	f.Add("orders", "évt\x00\xff\r\n", "orders", "x")
	f.Fuzz(func(t *testing.T, source1, id1, source2, id2 string) {
		k1 := handlers.IdempotencyKeyFor(&handlers.Event{Source: source1, EventID: id1})
		k2 := handlers.IdempotencyKeyFor(&handlers.Event{Source: source2, EventID: id2})
		if (source1 != source2 || id1 != id2) && k1 == k2 {
			t.Fatalf("rows (%q, %q) and (%q, %q) share Idempotency-Key %q", source1, id1, source2, id2, k1)
		}
		for _, row := range [][2]string{{source1, id1}, {source2, id2}} {
			source, id := row[0], row[1]
			key := handlers.IdempotencyKeyFor(&handlers.Event{Source: source, EventID: id})
			src, rest, ok := strings.Cut(key, "/")
			if !ok || unescape(t, src) != source || unescape(t, rest) != id {
				t.Fatalf("key %q of row (%q, %q) does not decode back to its row", key, source, id)
			}
			for _, v := range []string{key, handlers.EscapeHeaderValue(id), handlers.EscapeHeaderValue(source)} {
				if got, ok := wireValue(t, v); !ok || got != v {
					t.Fatalf("header value %q arrived as %q (ok %v)", v, got, ok)
				}
			}
			if plain := !strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '%' }); plain && handlers.EscapeHeaderValue(id) != id {
				t.Fatalf("plain id %q sent as %q", id, handlers.EscapeHeaderValue(id))
			}
		}
	})
}
