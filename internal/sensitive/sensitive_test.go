package sensitive

import "testing"

func TestCredentialHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"x-api-key": true, "Authorization": true, "proxy-authorization": true, "Cookie": true,
		"set-cookie": true, "x-auth-token": true, "client_secret": true, "X-Password": true,
		"x-session-id": true, "x-amz-security-token": true, "webhook-signature": true,
		"X-Hub-Signature-256": true, "apikey": true, "private-key": true,
		"idempotency-key": false, "Key": false, "content-type": false, "x-github-event": false,
		"event_id": false, "ce_type": false, "traceparent": false, "user-agent": false,
	} {
		if got := CredentialHeader(name); got != want {
			t.Errorf("CredentialHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestMask(t *testing.T) {
	if got := Mask("x-api-key", "sk_live_123"); got != Masked {
		t.Errorf("Mask(x-api-key) = %q, want %q", got, Masked)
	}
	if got := Mask("x-api-key", ""); got != "" {
		t.Errorf("Mask of an empty value = %q, want empty", got)
	}
	if got := Mask("content-type", "application/json"); got != "application/json" {
		t.Errorf("Mask(content-type) = %q, want it unchanged", got)
	}
}

func TestMaskHeaders(t *testing.T) {
	in := map[string]any{"x-api-key": "sk_live_123", "Authorization": map[string]any{"base64": "AAE="},
		"content-type": "application/json", "x-session-id": ""}
	got, ok := MaskHeaders(in).(map[string]any)
	if !ok {
		t.Fatalf("MaskHeaders returned %T", MaskHeaders(in))
	}
	want := map[string]any{"x-api-key": Masked, "Authorization": Masked, "content-type": "application/json", "x-session-id": ""}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("MaskHeaders: %s = %v, want %v", k, got[k], v)
		}
	}
	if in["x-api-key"] != "sk_live_123" {
		t.Error("MaskHeaders changed its argument")
	}
	if s := MaskHeaders("not an object"); s != "not an object" {
		t.Errorf("MaskHeaders of a string = %v", s)
	}
}
