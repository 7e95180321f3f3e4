package engine

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

func TestDecodeHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want map[string]string
	}{
		{``, nil},
		{`{}`, nil},
		{`not json`, nil},
		{`{"event_id":"e-1","content-type":"application/json"}`, map[string]string{"event_id": "e-1", "content-type": "application/json"}},
		{`{"bin":{"base64":"AP8="},"n":3}`, map[string]string{"bin": "\x00\xff"}},
		{`{"bad":{"base64":"%%%"}}`, map[string]string{}},
		{`{"a": "b", "c": "d"}`, map[string]string{"a": "b", "c": "d"}},
		{`{"esc": "a\"b\u00e9"}`, map[string]string{"esc": "a\"bé"}},
		{`{"a": "1", "a": "2"}`, map[string]string{"a": "2"}},
		{`{"a": "1",}`, nil},
		{`{"a": "1"} x`, nil},
		{"{\"bad\": \"\xff\"}", map[string]string{"bad": "\ufffd"}},
	}
	for _, tt := range tests {
		if got := decodeHeaders([]byte(tt.raw)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("decodeHeaders(%q) = %#v, want %#v", tt.raw, got, tt.want)
		}
	}
}

func BenchmarkDecodeHeaders(b *testing.B) {
	raw := []byte(`{"event_id":"order-00042","event_type":"order.created","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)
	for b.Loop() {
		decodeHeaders(raw)
	}
}

// The scanner for plain headers agrees with encoding/json on every input.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{``, `{}`, ` { } `, `{"a":"b"}`, `{"a": "b", "c": {"base64": "AP8="}}`, `{"a":"\u0041"}`,
		`{"a":1}`, `{"a":"b",}`, `{"a" "b"}`, `[]`, `{"a":"b"}}`, "{\"a\":\"\xff\"}", `{"":""}`, "{\"a\":\"\t\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := decodeHeaders(raw)
		want := map[string]string(nil)
		if len(raw) > 2 {
			want = decodeHeadersJSON(raw)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decodeHeaders(%q) = %#v, encoding/json gives %#v", raw, got, want)
		}
	})
}

func BenchmarkDecodeHeadersJSON(b *testing.B) {
	raw := []byte(`{"event_id":"order-00042","event_type":"order.created","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)
	for b.Loop() {
		decodeHeadersJSON(raw)
	}
}

// A claimed row reaches its handler whole: key, payload byte for byte,
// headers (plain and base64-wrapped), attempt and received_at.
func TestHandlerSeesTheWholeRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan *handlers.Event, 1)
	if err := b.reg.HandleFunc("whole", func(_ context.Context, ev *handlers.Event) error {
		got <- ev
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	payload := []byte{0, 1, 2, 0xff, '"', '\\'}
	if _, err := b.db.Pool.Exec(context.Background(), `INSERT INTO inbox (source, event_id, event_type, key, payload, headers)
		VALUES ('src', 'e-1', 'whole', '\x6b6579', $1, '{"trace": "t-1", "bin": {"base64": "AP8="}, "esc": "a\"b"}')`, payload); err != nil {
		t.Fatal(err)
	}
	b.start(t, testConfig())
	select {
	case ev := <-got:
		want := map[string]string{"trace": "t-1", "bin": "\x00\xff", "esc": `a"b`}
		if ev.Source != "src" || ev.EventID != "e-1" || string(ev.Key) != "key" || !bytes.Equal(ev.Payload, payload) ||
			!reflect.DeepEqual(ev.Headers, want) || ev.Attempt != 1 || ev.ReceivedAt.IsZero() {
			t.Errorf("handler got %+v (headers %#v), want the row as inserted with headers %#v", ev, ev.Headers, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler not called")
	}
}
