package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/inboxd/inboxd/internal/testkit"
)

// The signer follows the Standard Webhooks specification: its published
// test vector.
func TestSignWebhookVector(t *testing.T) {
	key, err := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := signWebhook(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("signature %s, want %s", got, want)
	}
}

// TestWebhookRun runs the webhook measurement on a few requests against the
// local PostgreSQL: the Kafka source's rate and the webhook's with their
// ratio, a latency run whose every request was answered 200 and stored, and
// the results and the chart written.
func TestWebhookRun(t *testing.T) {
	if testing.Short() {
		testkit.Unavailable(t, "-short: TestWebhookRun runs the benchmark against PostgreSQL")
	}
	dir := t.TempDir()
	b, res := smallRun(t, dir, []string{"-run", "webhook", "-webhook-events", "1000", "-webhook-senders", "8",
		"-webhook-latency-seconds", "1", "-latency-load", "0.2"}, "webhooks in", "Kafka source", "at 20% load")
	if len(res.Rates) != 2 || res.Rates[0].Name != "webhook-kafka" || res.Rates[1].Name != "webhook" {
		t.Fatalf("rates: %+v", res.Rates)
	}
	wh := res.Webhook
	if wh == nil || wh.Events != 1000 || wh.Ratio != res.Rates[1].PerSecond/res.Rates[0].PerSecond {
		t.Fatalf("webhook results: %s", b)
	}
	if l := wh.Latency; l == nil || l.Events == 0 || l.Non200 != 0 || l.Request.P99MS <= 0 {
		t.Errorf("latency: %+v", wh.Latency)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "rates.png")); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("rates.png: %v", err)
	}
}
