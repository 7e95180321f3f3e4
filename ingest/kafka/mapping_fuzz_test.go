package kafka

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// fuzzHeaders decodes the header list of FuzzMapMessage from blob: repeated
// [name length][name][value length][value], lengths one byte each; the name
// bytes select one of the configured names when they are a single byte below
// len(headerNames), so the fuzzer reaches the id and type headers easily.
func fuzzHeaders(blob []byte) []kafka.Header {
	headerNames := []string{"event_id", "ce_id", "event_type", "ce_type", "content-type"}
	var hs []kafka.Header
	take := func() ([]byte, bool) {
		if len(blob) == 0 {
			return nil, false
		}
		n := min(int(blob[0]), len(blob)-1)
		v := blob[1 : 1+n]
		blob = blob[1+n:]
		return v, true
	}
	for {
		name, ok := take()
		if !ok {
			return hs
		}
		value, _ := take()
		key := string(name)
		if len(name) == 1 && int(name[0]) < len(headerNames) {
			key = headerNames[name[0]]
		}
		hs = append(hs, kafka.Header{Key: key, Value: value})
	}
}

// FuzzMapMessage checks MapMessage on any key, value, headers, partition and
// offset: it never panics; the row is either received, with an event id and
// type that are valid UTF-8, NUL-free, non-empty and at most
// MaxIdentifierBytes, or rejected, with a reason, a non-empty last_error
// fit for a text column and the event id <topic>/<partition>/<offset>; the
// headers are a JSON object jsonb accepts (valid UTF-8, no \u0000) that keeps
// the last value of every header, or {} when they are over MaxHeaders; the
// key and payload are kept byte for byte unless over their bound (a key
// over MaxKeyBytes is nil); a row with anything over its bound is rejected
// as oversize, and only then.
func FuzzMapMessage(f *testing.F) {
	hdr := func(kv ...string) []byte {
		var b []byte
		for _, s := range kv {
			b = append(b, byte(len(s)))
			b = append(b, s...)
		}
		return b
	}
	f.Add([]byte("k"), []byte(`{"a":1}`), hdr("\x00", "e1", "\x02", "order.created"), int64(0), int32(0), uint8(0))
	f.Add([]byte(nil), []byte("v"), hdr("\x01", "ce-1", "\x03", "t"), int64(42), int32(3), uint8(0))
	f.Add([]byte{0xff}, []byte{0, 1, 0xff}, hdr("\x00", "\xff\xfe", "\x02", "t"), int64(-1), int32(-1), uint8(0))
	f.Add([]byte(nil), []byte(nil), hdr("\x00", "a\x00b", "\x02", ""), int64(7), int32(1), uint8(0))
	f.Add([]byte(nil), []byte("v"), hdr("\x00", "a\x00b", "\x02", "t"), int64(7), int32(1), uint8(0))
	f.Add([]byte(nil), []byte(`{"id": 12, "type": "x"}`), []byte(nil), int64(1), int32(0), uint8(1))
	f.Add([]byte(nil), []byte(`{"id": "\u0000", "type": ["x"]}`), []byte(nil), int64(1), int32(0), uint8(1))
	f.Add([]byte(nil), []byte(`{"id": "\ud800", "type": null}`), []byte(nil), int64(1), int32(0), uint8(1))
	f.Add([]byte(nil), bytes.Repeat([]byte("x"), 40), hdr("\x00", "e", "\x02", "t"), int64(9), int32(0), uint8(2))
	f.Add([]byte(nil), []byte("v"), hdr("na\xffme\x00", "va\x00lue", "\uFFFD", "x", "\x00", "e", "\x02", "t"), int64(1), int32(0), uint8(0))
	f.Add([]byte(nil), []byte("v"), hdr("\x00", strings.Repeat("i", 250), "\x02", "t", "\x00", "e2"), int64(1), int32(0), uint8(0))
	f.Add(bytes.Repeat([]byte("k"), ingest.MaxKeyBytes+1), []byte("v"), hdr("\x00", "e", "\x02", "t"), int64(3), int32(0), uint8(0))
	f.Add([]byte("k"), []byte("v"), hdr("\x00", "e", "\x02", "t", "trace", strings.Repeat("t", 30)), int64(4), int32(0), uint8(8))
	f.Add([]byte("k"), bytes.Repeat([]byte("x"), 40), hdr("\x00", "e", "\x02", "t", "trace", strings.Repeat("t", 30)), int64(5), int32(0), uint8(10))
	f.Fuzz(func(t *testing.T, key, value, headerBlob []byte, offset int64, partition int32, flags uint8) {
		opts := ingest.MapOptions{}
		if flags&1 != 0 {
			opts.EventIDJSONField, opts.EventTypeJSONField = "id", "type"
		}
		if flags&2 != 0 {
			opts.MaxPayload = 32 // reaches oversize without megabyte inputs
		}
		if flags&4 != 0 {
			opts.EventIDHeaders = []string{} // JSON field only
		}
		if flags&8 != 0 {
			opts.MaxHeaders = 24 // reaches oversize headers without large inputs
		}
		m := kafka.Message{Topic: "orders", Partition: int(partition), Offset: offset,
			Key: key, Value: value, Headers: fuzzHeaders(headerBlob)}
		row := kafkamap.MapMessage(m, opts)
		limit := ingestcore.MapDefaults(opts).MaxPayload
		bigKey := len(key) > ingest.MaxKeyBytes
		bigHeaders := ingestcore.HeadersSize(kafkamap.FromKafkaHeaders(m.Headers)) > ingestcore.MapDefaults(opts).MaxHeaders

		if row.Source != "orders" || row.Partition != partition || row.Offset != offset {
			t.Fatalf("position changed: %+v", row)
		}
		switch {
		case bigKey && row.Key != nil:
			t.Fatalf("key of %d bytes, over the bound, kept (%d)", len(key), len(row.Key))
		case !bigKey && (!bytes.Equal(row.Key, key) || (row.Key == nil) != (key == nil)):
			t.Fatalf("key changed: %q -> %q", key, row.Key)
		}
		if bigHeaders {
			if string(row.Headers) != "{}" {
				t.Fatalf("headers over the bound stored: %q", row.Headers)
			}
		} else {
			// Stored: the message's headers less any inboxd-tombstone, plus
			// inboxd-tombstone: true for a nil value.
			want := slices.DeleteFunc(slices.Clone(m.Headers), func(h kafka.Header) bool { return h.Key == ingest.TombstoneHeader })
			if value == nil {
				want = append(want, kafka.Header{Key: ingest.TombstoneHeader, Value: []byte("true")})
			}
			checkHeadersJSON(t, want, row.Headers)
		}
		oversize := len(value) > limit
		tooBig := oversize || bigKey || bigHeaders
		switch {
		case row.Payload == nil:
			t.Fatal("payload is nil (stored as NULL)")
		case oversize && len(row.Payload) != 0:
			t.Fatalf("oversize payload of %d bytes kept (%d)", len(value), len(row.Payload))
		case !oversize && !bytes.Equal(row.Payload, value):
			t.Fatalf("payload changed: %q -> %q", value, row.Payload)
		}
		switch row.Status {
		case ingestcore.StatusReceived:
			if tooBig || row.Reason != "" || row.LastError != "" {
				t.Fatalf("received row with reason %q, last_error %q, over a bound %v", row.Reason, row.LastError, tooBig)
			}
			checkIdentifierOK(t, "event id", row.EventID, false)
			checkIdentifierOK(t, "event type", row.EventType, false)
		case ingestcore.StatusRejected:
			if row.EventID != fmt.Sprintf("orders/%d/%d", partition, offset) {
				t.Fatalf("rejected row's event id %q, want orders/%d/%d", row.EventID, partition, offset)
			}
			switch row.Reason {
			case ingestcore.RejectMissingID, ingestcore.RejectInvalidID, ingestcore.RejectMissingType, ingestcore.RejectInvalidType, ingestcore.RejectOversize:
			default:
				t.Fatalf("rejected row with reason %q", row.Reason)
			}
			if tooBig != (row.Reason == ingestcore.RejectOversize) {
				t.Fatalf("reason %q for a payload of %d bytes (limit %d), a key of %d, headers of %d",
					row.Reason, len(value), limit, len(key), ingestcore.HeadersSize(kafkamap.FromKafkaHeaders(m.Headers)))
			}
			if row.LastError == "" || !utf8.ValidString(row.LastError) || strings.IndexByte(row.LastError, 0) >= 0 {
				t.Fatalf("last_error %q is empty or not fit for a text column", row.LastError)
			}
			checkIdentifierOK(t, "event type", row.EventType, true)
		default:
			t.Fatalf("status %q", row.Status)
		}
	})
}

// checkIdentifierOK fails unless s can be stored as an event id or type:
// valid UTF-8, no NUL, at most MaxIdentifierBytes, and non-empty unless
// mayBeEmpty.
func checkIdentifierOK(t *testing.T, what, s string, mayBeEmpty bool) {
	t.Helper()
	if (s == "" && !mayBeEmpty) || len(s) > ingest.MaxIdentifierBytes || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		t.Fatalf("%s %q cannot be stored", what, s)
	}
}

// checkHeadersJSON checks that enc is a JSON object jsonb accepts and that it
// holds, for every header name (made valid UTF-8 without NUL), the last
// value: as a string, or as {"base64": …} when the value is not valid UTF-8
// or holds a NUL.
func checkHeadersJSON(t *testing.T, hs []kafka.Header, enc []byte) {
	t.Helper()
	if !utf8.Valid(enc) || !json.Valid(enc) {
		t.Fatalf("headers %q are not valid UTF-8 JSON", enc)
	}
	var obj map[string]any
	if err := json.Unmarshal(enc, &obj); err != nil {
		t.Fatalf("headers %q are not a JSON object: %v", enc, err)
	}
	want := map[string][]byte{}
	for _, h := range hs {
		name := strings.ReplaceAll(strings.ToValidUTF8(h.Key, "\uFFFD"), "\x00", "\uFFFD")
		want[name] = h.Value
	}
	if len(obj) != len(want) {
		t.Fatalf("headers %q: %d names, want %d", enc, len(obj), len(want))
	}
	for name, v := range want {
		// A decoded string without NUL means no \u0000 escape: jsonb refuses one.
		if strings.IndexByte(name, 0) >= 0 {
			t.Fatalf("header name %q holds a NUL", name)
		}
		switch got := obj[name].(type) {
		case string:
			if got != string(v) || strings.IndexByte(got, 0) >= 0 {
				t.Fatalf("header %q = %q, want %q", name, got, v)
			}
		case map[string]any:
			b64, _ := got["base64"].(string)
			if len(got) != 1 || b64 != base64.StdEncoding.EncodeToString(v) || (utf8.Valid(v) && bytes.IndexByte(v, 0) < 0) {
				t.Fatalf("header %q = %v, want the value %q", name, got, v)
			}
		default:
			t.Fatalf("header %q = %#v", name, obj[name])
		}
	}
}

// The headers FuzzMapMessage checks statically are accepted by PostgreSQL's
// jsonb for the awkward cases: NUL and invalid UTF-8 in names and values,
// the literal text \u0000, U+2028, surrogate halves, HTML characters.
func TestMapMessageHeadersFitJSONB(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	hs := []kafka.Header{
		{Key: "na\x00me", Value: []byte("va\x00lue")},
		{Key: "bad\xff\xfe", Value: []byte{0xff, 0xfe, 0}},
		{Key: `\u0000`, Value: []byte(`\u0000 and \\u0000`)},
		{Key: "sep\u2028", Value: []byte("para\u2029<&>")},
		{Key: "cesu", Value: []byte{0xed, 0xa0, 0x80}},
		{Key: "\uFFFD", Value: []byte("replacement")},
		{Key: "", Value: nil},
	}
	row := kafkamap.MapMessage(kafka.Message{Topic: "t", Value: []byte("v"), Headers: hs}, ingest.MapOptions{})
	checkHeadersJSON(t, hs, row.Headers)
	var back string
	if err := db.Pool.QueryRow(context.Background(), `SELECT $1::text::jsonb::text`, string(row.Headers)).Scan(&back); err != nil {
		t.Fatalf("jsonb refuses %q: %v", row.Headers, err)
	}
	var a, b map[string]any
	if json.Unmarshal(row.Headers, &a) != nil || json.Unmarshal([]byte(back), &b) != nil || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("jsonb changed the headers: %q -> %q", row.Headers, back)
	}
}
