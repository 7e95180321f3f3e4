package kafka

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/segmentio/kafka-go"
)

func hdrs(kv ...string) []kafka.Header {
	var hs []kafka.Header
	for i := 0; i < len(kv); i += 2 {
		hs = append(hs, kafka.Header{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return hs
}

func TestMapMessage(t *testing.T) {
	t.Parallel()

	big := bytes.Repeat([]byte("x"), 2000)
	bigSum := sha256.Sum256(big)
	binary := []byte{0, 1, 2, 0xff, 0xfe, 'a', 0}
	jsonOpts := ingest.MapOptions{EventIDJSONField: "id", EventTypeJSONField: "type", MaxPayload: 1024}

	tests := []struct {
		name string
		msg  kafka.Message
		opts ingest.MapOptions
		want ingestcore.Row // Source, Partition, Offset and Headers are checked separately
	}{
		{
			name: "event_id and event_type headers",
			msg:  kafka.Message{Key: []byte("k1"), Value: []byte(`{"a":1}`), Headers: hdrs("event_id", "e1", "event_type", "order.created")},
			want: ingestcore.Row{EventID: "e1", EventType: "order.created", Key: []byte("k1"), Payload: []byte(`{"a":1}`), Status: ingestcore.StatusReceived},
		},
		{
			name: "event_id wins over ce_id",
			msg:  kafka.Message{Value: []byte("v"), Headers: hdrs("ce_id", "ce-1", "event_id", "e1", "ce_type", "ce.t", "event_type", "t")},
			want: ingestcore.Row{EventID: "e1", EventType: "t", Payload: []byte("v"), Status: ingestcore.StatusReceived},
		},
		{
			name: "CloudEvents fallback",
			msg:  kafka.Message{Value: []byte("v"), Headers: hdrs("ce_id", "ce-1", "ce_type", "com.example.thing")},
			want: ingestcore.Row{EventID: "ce-1", EventType: "com.example.thing", Payload: []byte("v"), Status: ingestcore.StatusReceived},
		},
		{
			name: "empty event_id header falls through to ce_id",
			msg:  kafka.Message{Value: []byte("v"), Headers: hdrs("event_id", "", "ce_id", "ce-1", "event_type", "t")},
			want: ingestcore.Row{EventID: "ce-1", EventType: "t", Payload: []byte("v"), Status: ingestcore.StatusReceived},
		},
		{
			name: "repeated header: last wins",
			msg:  kafka.Message{Value: []byte("v"), Headers: hdrs("event_id", "first", "event_type", "t", "event_id", "second")},
			want: ingestcore.Row{EventID: "second", EventType: "t", Payload: []byte("v"), Status: ingestcore.StatusReceived},
		},
		{
			name: "configured header names",
			msg:  kafka.Message{Value: []byte("v"), Headers: hdrs("event_id", "ignored", "x-id", "i", "x-type", "t")},
			opts: ingest.MapOptions{EventIDHeaders: []string{"x-id"}, EventTypeHeaders: []string{"x-type"}},
			want: ingestcore.Row{EventID: "i", EventType: "t", Payload: []byte("v"), Status: ingestcore.StatusReceived},
		},
		{
			name: "JSON field fallback",
			msg:  kafka.Message{Value: []byte(`{"id":"j1","type":"from.json","n":1}`)},
			opts: jsonOpts,
			want: ingestcore.Row{EventID: "j1", EventType: "from.json", Payload: []byte(`{"id":"j1","type":"from.json","n":1}`), Status: ingestcore.StatusReceived},
		},
		{
			name: "header wins over JSON field; numeric JSON id",
			msg:  kafka.Message{Value: []byte(`{"id":12345,"type":"from.json"}`), Headers: hdrs("event_type", "from.header")},
			opts: jsonOpts,
			want: ingestcore.Row{EventID: "12345", EventType: "from.header", Payload: []byte(`{"id":12345,"type":"from.json"}`), Status: ingestcore.StatusReceived},
		},
		{
			name: "missing event id",
			msg:  kafka.Message{Topic: "orders", Partition: 3, Offset: 42, Key: []byte("key-7"), Value: []byte("v"), Headers: hdrs("event_type", "t")},
			want: ingestcore.Row{EventID: "orders/3/42", EventType: "t", Key: []byte("key-7"), Payload: []byte("v"), Status: ingestcore.StatusRejected,
				Reason: ingestcore.RejectMissingID, LastError: "missing event id (headers event_id, ce_id)"},
		},
		{
			name: "missing event type",
			msg:  kafka.Message{Topic: "orders", Partition: 0, Offset: 7, Value: []byte("v"), Headers: hdrs("event_id", "e1")},
			want: ingestcore.Row{EventID: "orders/0/7", EventType: "", Payload: []byte("v"), Status: ingestcore.StatusRejected,
				Reason: ingestcore.RejectMissingType, LastError: "missing event type (headers event_type, ce_type)"},
		},
		{
			name: "missing both, JSON field configured but payload not JSON",
			msg:  kafka.Message{Topic: "orders", Partition: 1, Offset: 9, Value: []byte("not json")},
			opts: jsonOpts,
			want: ingestcore.Row{EventID: "orders/1/9", Payload: []byte("not json"), Status: ingestcore.StatusRejected, Reason: ingestcore.RejectMissingID,
				LastError: "missing event id (headers event_id, ce_id; JSON field id); missing event type (headers event_type, ce_type; JSON field type)"},
		},
		{
			name: "JSON field of the wrong kind",
			msg:  kafka.Message{Topic: "orders", Offset: 1, Value: []byte(`{"id":{"x":1},"type":"t"}`)},
			opts: jsonOpts,
			want: ingestcore.Row{EventID: "orders/0/1", EventType: "t", Payload: []byte(`{"id":{"x":1},"type":"t"}`), Status: ingestcore.StatusRejected,
				Reason: ingestcore.RejectInvalidID, LastError: "invalid event id in JSON field id (after headers event_id, ce_id): neither a string nor a number"},
		},
		{
			name: "event id with a NUL byte",
			msg:  kafka.Message{Topic: "orders", Offset: 2, Value: []byte("v"), Headers: hdrs("event_id", "a\x00b", "event_type", "t")},
			want: ingestcore.Row{EventID: "orders/0/2", EventType: "t", Payload: []byte("v"), Status: ingestcore.StatusRejected,
				Reason: ingestcore.RejectInvalidID, LastError: "invalid event id in header event_id: contains a NUL byte"},
		},
		{
			name: "event type not UTF-8",
			msg:  kafka.Message{Topic: "orders", Offset: 3, Value: []byte("v"), Headers: hdrs("event_id", "e", "event_type", "\xff\xfe")},
			want: ingestcore.Row{EventID: "orders/0/3", Payload: []byte("v"), Status: ingestcore.StatusRejected,
				Reason: ingestcore.RejectInvalidType, LastError: "invalid event type in header event_type: not valid UTF-8"},
		},
		{
			name: "event id too long",
			msg:  kafka.Message{Topic: "orders", Offset: 4, Value: []byte("v"), Headers: hdrs("event_id", strings.Repeat("i", ingest.MaxIdentifierBytes+1), "event_type", "t")},
			want: ingestcore.Row{EventID: "orders/0/4", EventType: "t", Payload: []byte("v"), Status: ingestcore.StatusRejected,
				Reason: ingestcore.RejectInvalidID, LastError: "invalid event id in header event_id: 1025 bytes, longer than 1024"},
		},
		{
			name: "oversize payload is not stored",
			msg:  kafka.Message{Topic: "orders", Partition: 2, Offset: 5, Key: []byte("k"), Value: big, Headers: hdrs("event_id", "e1", "event_type", "t")},
			opts: ingest.MapOptions{MaxPayload: 1024},
			want: ingestcore.Row{EventID: "orders/2/5", EventType: "t", Key: []byte("k"), Payload: []byte{}, Status: ingestcore.StatusRejected, Reason: ingestcore.RejectOversize,
				LastError: "payload of 2000 bytes exceeds INBOXD_MAX_PAYLOAD (1024); sha256=" + hex.EncodeToString(bigSum[:])},
		},
		{
			name: "oversize and missing id: the size is the reason, no JSON parsed",
			msg:  kafka.Message{Topic: "orders", Offset: 6, Value: big},
			opts: ingest.MapOptions{MaxPayload: 1024, EventIDJSONField: "id"},
			want: ingestcore.Row{EventID: "orders/0/6", Payload: []byte{}, Status: ingestcore.StatusRejected, Reason: ingestcore.RejectOversize,
				LastError: "payload of 2000 bytes exceeds INBOXD_MAX_PAYLOAD (1024); sha256=" + hex.EncodeToString(bigSum[:])},
		},
		{
			name: "payload exactly at the limit is kept",
			msg:  kafka.Message{Value: big[:1024], Headers: hdrs("event_id", "e", "event_type", "t")},
			opts: ingest.MapOptions{MaxPayload: 1024},
			want: ingestcore.Row{EventID: "e", EventType: "t", Payload: big[:1024], Status: ingestcore.StatusReceived},
		},
		{
			name: "NUL and invalid UTF-8 payload kept byte for byte",
			msg:  kafka.Message{Value: binary, Headers: hdrs("event_id", "e", "event_type", "t")},
			want: ingestcore.Row{EventID: "e", EventType: "t", Payload: binary, Status: ingestcore.StatusReceived},
		},
		{
			name: "nil value becomes an empty payload, nil key stays nil",
			msg:  kafka.Message{Headers: hdrs("event_id", "e", "event_type", "t")},
			want: ingestcore.Row{EventID: "e", EventType: "t", Payload: []byte{}, Status: ingestcore.StatusReceived},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := kafkamap.MapMessage(tt.msg, tt.opts)
			if got.Source != tt.msg.Topic || got.Partition != int32(tt.msg.Partition) || got.Offset != tt.msg.Offset {
				t.Errorf("position = %s/%d/%d, want %s/%d/%d", got.Source, got.Partition, got.Offset, tt.msg.Topic, tt.msg.Partition, tt.msg.Offset)
			}
			if !json.Valid(got.Headers) {
				t.Errorf("headers %q are not valid JSON", got.Headers)
			}
			got.Source, got.Partition, got.Offset, got.Headers = "", 0, 0, nil
			if got.EventID != tt.want.EventID || got.EventType != tt.want.EventType || got.Status != tt.want.Status ||
				got.Reason != tt.want.Reason || got.LastError != tt.want.LastError {
				t.Errorf("got  id=%q type=%q status=%s reason=%s error=%q\nwant id=%q type=%q status=%s reason=%s error=%q",
					got.EventID, got.EventType, got.Status, got.Reason, got.LastError,
					tt.want.EventID, tt.want.EventType, tt.want.Status, tt.want.Reason, tt.want.LastError)
			}
			if !bytes.Equal(got.Key, tt.want.Key) || (got.Key == nil) != (tt.want.Key == nil) {
				t.Errorf("key = %q (nil %t), want %q (nil %t)", got.Key, got.Key == nil, tt.want.Key, tt.want.Key == nil)
			}
			if !bytes.Equal(got.Payload, tt.want.Payload) || got.Payload == nil {
				t.Errorf("payload = %q (nil %t), want %q", got.Payload, got.Payload == nil, tt.want.Payload)
			}
		})
	}
}

func TestEncodeHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []kafka.Header
		want string
	}{
		{"none", nil, `{}`},
		{"plain strings", hdrs("event_id", "e1", "traceparent", "00-abc-01"), `{"event_id":"e1","traceparent":"00-abc-01"}`},
		{"last wins", hdrs("a", "1", "a", "2"), `{"a":"2"}`},
		{"empty value", hdrs("a", ""), `{"a":""}`},
		{"NUL byte is base64", []kafka.Header{{Key: "bin", Value: []byte("a\x00b")}}, `{"bin":{"base64":"YQBi"}}`},
		{"invalid UTF-8 is base64", []kafka.Header{{Key: "bin", Value: []byte{0xff, 0xfe}}}, `{"bin":{"base64":"//4="}}`},
		{"unicode kept", hdrs("name", "Grüße ✓"), `{"name":"Grüße ✓"}`},
		{"bad name sanitised", []kafka.Header{{Key: "a\x00\xff", Value: []byte("v")}}, `{"a\ufffd\ufffd":"v"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ingestcore.EncodeHeaders(kafkamap.FromKafkaHeaders(tt.in))
			var gotV, wantV any
			if err := json.Unmarshal(got, &gotV); err != nil {
				t.Fatalf("EncodeHeaders = %q: %v", got, err)
			}
			if err := json.Unmarshal([]byte(tt.want), &wantV); err != nil {
				t.Fatal(err)
			}
			g, _ := json.Marshal(gotV)
			w, _ := json.Marshal(wantV)
			if !bytes.Equal(g, w) {
				t.Errorf("EncodeHeaders = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPositionID(t *testing.T) {
	t.Parallel()
	if got := ingestcore.KafkaPositionID("orders.v1", 12, 9876543210); got != "orders.v1/12/9876543210" {
		t.Errorf("PositionID = %q", got)
	}
}

// The plain-headers writer and encoding/json give the same object for any
// headers (and the plain writer's output is valid JSON).
func FuzzEncodeHeaders(f *testing.F) {
	f.Add([]byte("a"), []byte("1"), []byte("b"), []byte("2"))
	f.Add([]byte("a"), []byte("q\"uo\\te\n"), []byte("a"), []byte("dup"))
	f.Add([]byte("<tag>&"), []byte("\u2028"), []byte("x\x00"), []byte{0xff})
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 []byte) {
		hs := []kafka.Header{{Key: string(k1), Value: v1}, {Key: string(k2), Value: v2}}
		var got, want any
		if err := json.Unmarshal(ingestcore.EncodeHeaders(kafkamap.FromKafkaHeaders(hs)), &got); err != nil {
			t.Fatalf("EncodeHeaders(%q) is not JSON: %v", hs, err)
		}
		if err := json.Unmarshal(ingestcore.EncodeHeadersJSON(kafkamap.FromKafkaHeaders(hs)), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("EncodeHeaders(%q) = %v, encoding/json gives %v", hs, got, want)
		}
	})
}

func BenchmarkEncodeHeaders(b *testing.B) {
	hs := hdrs("event_id", "order-00042", "event_type", "order.created", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			ingestcore.EncodeHeaders(kafkamap.FromKafkaHeaders(hs))
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			ingestcore.EncodeHeadersJSON(kafkamap.FromKafkaHeaders(hs))
		}
	})
}
