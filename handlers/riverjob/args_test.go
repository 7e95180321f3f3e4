package riverjob

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/handlers"
)

// paymentCaptured is how a Go River worker declares its args: EventArgs
// embedded, the route's kind.
type paymentCaptured struct{ EventArgs }

func (paymentCaptured) Kind() string { return "payment_captured" }

func encode(t *testing.T, ev *handlers.Event) (map[string]json.RawMessage, []byte) {
	t.Helper()
	b, err := json.Marshal(jobArgs{kind: "payment_captured", EventArgs: NewEventArgs(ev)})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	return fields, b
}

func TestArgsJSONShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		key     []byte
		payload string
		// want is the args object's JSON, field by field; a field absent
		// from want must be absent from the args.
		want map[string]string
	}{
		{"json object", []byte("order-7"), `{"amount": 10, "currency": "EUR"}`, map[string]string{
			"key": `"b3JkZXItNw=="`, "payload": `{"amount":10,"currency":"EUR"}`}},
		{"json scalar", nil, `42`, map[string]string{"key": `null`, "payload": `42`}},
		{"json null", nil, `null`, map[string]string{"key": `null`, "payload": `null`}},
		{"json string", nil, `"<a&b>"`, map[string]string{"key": `null`, "payload": `"\u003ca\u0026b\u003e"`}},
		{"json with a surrogate pair", nil, `["\ud83d\ude00"]`, map[string]string{"key": `null`, "payload": `["\ud83d\ude00"]`}},
		{"json with an escaped backslash before u", nil, `["\\ud800"]`, map[string]string{"key": `null`, "payload": `["\\ud800"]`}},
		{"not json", []byte{0, 1, 0xff}, "hello, world", map[string]string{
			"key": `"AAH/"`, "payload_base64": `"aGVsbG8sIHdvcmxk"`}},
		{"binary", []byte{}, "\x00\x01\x02\xff", map[string]string{"key": `""`, "payload_base64": `"AAEC/w=="`}},
		{"truncated json", nil, `{"amount":`, map[string]string{"key": `null`, "payload_base64": `"eyJhbW91bnQiOg=="`}},
		{"json with invalid utf-8", nil, "\"caf\xe9\"", map[string]string{"key": `null`, "payload_base64": `"ImNhZuki"`}},
		{"json with a NUL escape", nil, `{"a":"\u0000"}`, map[string]string{"key": `null`, "payload_base64": `"eyJhIjoiXHUwMDAwIn0="`}},
		{"json with a lone high surrogate", nil, `["\ud800"]`, map[string]string{"key": `null`, "payload_base64": `"WyJcdWQ4MDAiXQ=="`}},
		{"json with a lone low surrogate", nil, `["\uDC00x"]`, map[string]string{"key": `null`, "payload_base64": `"WyJcdURDMDB4Il0="`}},
		{"json with a high surrogate before a non-surrogate", nil, `["\ud800\u0041"]`, map[string]string{"key": `null`, "payload_base64": `"WyJcdWQ4MDBcdTAwNDEiXQ=="`}},
		{"empty", nil, "", map[string]string{"key": `null`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := &handlers.Event{EventID: "pay-42", EventType: "payment.captured", Source: "payments", Key: tt.key, Payload: []byte(tt.payload)}
			fields, raw := encode(t, ev)
			want := map[string]string{"event_id": `"pay-42"`, "event_type": `"payment.captured"`, "source": `"payments"`}
			for k, v := range tt.want {
				want[k] = v
			}
			for k, v := range want {
				if got, ok := fields[k]; !ok || string(got) != v {
					t.Errorf("%s = %s (present %v), want %s; args %s", k, got, ok, v, raw)
				}
			}
			for k := range fields {
				if _, ok := want[k]; !ok {
					t.Errorf("unexpected field %s in %s", k, raw)
				}
			}

			// A Go worker gets the event back.
			var got paymentCaptured
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if got.EventID != ev.EventID || got.EventType != ev.EventType || got.Source != ev.Source {
				t.Errorf("decoded %+v", got.EventArgs)
			}
			if !bytes.Equal(got.Key, tt.key) || (got.Key == nil) != (tt.key == nil) {
				t.Errorf("decoded key %q (nil %v), want %q (nil %v)", got.Key, got.Key == nil, tt.key, tt.key == nil)
			}
			_, asJSON := tt.want["payload"]
			switch body := got.PayloadBytes(); {
			case asJSON:
				if !jsonEqual(t, body, []byte(tt.payload)) {
					t.Errorf("decoded payload %s, want the JSON value %s", body, tt.payload)
				}
			case !bytes.Equal(body, []byte(tt.payload)):
				t.Errorf("decoded payload %q, want %q", body, tt.payload)
			}
		})
	}
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

func TestKindIsTheRoutes(t *testing.T) {
	t.Parallel()
	a := jobArgs{kind: "payment_captured", EventArgs: NewEventArgs(&handlers.Event{EventID: "x"})}
	if a.Kind() != "payment_captured" {
		t.Fatalf("kind %q", a.Kind())
	}
	b, _ := json.Marshal(a)
	if strings.Contains(string(b), "payment_captured") {
		t.Fatalf("the kind leaked into the args: %s", b)
	}
}

func TestCheckJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		job  handlers.Job
		want []string // one error line each, by prefix; none: valid
	}{
		{handlers.Job{Kind: "payment_captured"}, nil},
		{handlers.Job{Kind: "billing.Invoice/paid:v2", Queue: "payments-high_1", Priority: 4, MaxAttempts: 32767}, nil},
		{handlers.Job{Kind: ""}, []string{"kind: "}},
		{handlers.Job{Kind: "x"}, []string{"kind: "}},
		{handlers.Job{Kind: "has space"}, []string{"kind: "}},
		{handlers.Job{Kind: "ok_kind", Queue: "Payments"}, []string{"queue: "}},
		{handlers.Job{Kind: "ok_kind", Queue: "a__b"}, []string{"queue: "}},
		{handlers.Job{Kind: "ok_kind", Queue: strings.Repeat("q", 65)}, []string{"queue: River queue names are at most 64"}},
		{handlers.Job{Kind: "ok_kind", Priority: 5}, []string{"priority: "}},
		{handlers.Job{Kind: "ok_kind", MaxAttempts: 40000}, []string{"max_attempts: "}},
		{handlers.Job{Kind: "-bad", Queue: "bad queue", Priority: -1, MaxAttempts: -1},
			[]string{"kind: ", "queue: ", "priority: ", "max_attempts: "}},
	}
	for _, tt := range tests {
		err := CheckJob(tt.job)
		if len(tt.want) == 0 {
			if err != nil {
				t.Errorf("%+v: %v", tt.job, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%+v: no error, want %q", tt.job, tt.want)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(tt.want) {
			t.Errorf("%+v: %d error lines, want %d:\n%v", tt.job, len(lines), len(tt.want), err)
			continue
		}
		for i, w := range tt.want {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("%+v: line %d = %q, want prefix %q", tt.job, i+1, lines[i], w)
			}
		}
	}
}
