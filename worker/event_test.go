package worker

import (
	"reflect"
	"testing"
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
