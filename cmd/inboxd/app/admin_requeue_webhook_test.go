package app

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/ingest/webhook"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// webhookKey is the signing key of the requeue tests' Standard Webhooks
// source; its secret file holds whsec_<base64 of it>.
var webhookKey = []byte("requeue-test-key-0123456789abcdef")

// postSignedWebhook serves the webhook source sources (its secret file
// holding webhookKey) on db through the real listener, POSTs one Standard
// Webhooks request signed for id with body and the extra (unsigned)
// headers, and returns the answer's code and body.
func postSignedWebhook(t *testing.T, db *pgtest.DB, sources []webhook.SourceConfig, id string, body []byte, extra http.Header) (int, string) {
	t.Helper()
	src, err := webhook.New(webhook.Config{Addr: "127.0.0.1:0", Sources: sources}).Open(source.Env{DB: db.Pool, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook source: %v", err)
		}
	}()
	testkit.WaitFor(t, 10*time.Second, "the webhook source listens", func() bool { return src.Ready() == nil })
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, webhookKey)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, "http://"+src.(interface{ Addr() string }).Addr()+webhook.PathPrefix+sources[0].Name, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = extra.Clone()
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// writeWebhookSourcesFile writes a webhook sources file holding yaml, with
// its secret file (whsec_ of webhookKey) at $SECRET, and returns its path.
func writeWebhookSourcesFile(t *testing.T, yaml string) string {
	t.Helper()
	dir := t.TempDir()
	secret := filepath.Join(dir, "std.secret")
	if err := os.WriteFile(secret, []byte("whsec_"+base64.StdEncoding.EncodeToString(webhookKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "webhooks.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(yaml, "$SECRET", secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A signed Standard Webhooks request without "type" is a rejected row.
// Requeued, by the CLI or the console, it is mapped by the rules of the
// webhook source that stored it, never by the brokers' (which would take
// the unsigned event_id and event_type headers the sender added): without
// the webhook sources file, or with one that does not name the source, it
// stays rejected and says why; with the file, it stays rejected while its
// source still finds no type, and is requeued under its signed id once the
// source gives one.
func TestRequeueRejectedWebhookRowByItsSourceRules(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	std := []webhook.SourceConfig{{Name: "pay", Verify: webhook.Standard,
		Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString(webhookKey)}}}
	body := []byte(`{"data":{"refund":"r-1","amount":100}}`)
	code, out := postSignedWebhook(t, db, std, "msg_signed_1", body,
		http.Header{"Event_id": {"chosen-by-anyone"}, "Event_type": {"refund.issued"}})
	if code != 200 || !strings.Contains(out, "missing_type") {
		t.Fatalf("signed request without a type: %d %s", code, out)
	}
	var id int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT id FROM inbox WHERE source = 'pay' AND status = 'rejected'`).Scan(&id); err != nil {
		t.Fatalf("the rejected row: %v", err)
	}
	attacker := func() int {
		var n int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE event_id = 'chosen-by-anyone' OR event_type = 'refund.issued'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	base := []string{"INBOXD_DATABASE_URL=" + db.URL}
	withSources := func(yaml string) []string {
		return append(base[:1:1], "INBOXD_WEBHOOK_ADDR=127.0.0.1:0", "INBOXD_WEBHOOK_SOURCES="+writeWebhookSourcesFile(t, yaml))
	}

	// The CLI without the webhook sources file: refused, with the reason.
	code, out, stderr := runMain(t, base, "requeue", "--status", "rejected", "--all")
	if code != ExitFailure || !strings.Contains(out, "id "+itoa(id)+`: still rejected with the current configuration: a row of the webhook source "pay" is mapped again only by that source's rules, and INBOXD_WEBHOOK_SOURCES is not set`) {
		t.Fatalf("requeue without INBOXD_WEBHOOK_SOURCES: exit %d\n%s%s", code, out, stderr)
	}
	if n := attacker(); n != 0 {
		t.Fatalf("%d rows under the unsigned headers' id or type", n)
	}

	// A sources file that does not name the row's source: refused too.
	other := withSources("sources:\n  - {name: shop, verify: standard-webhooks, secret_file: $SECRET}\n")
	code, out, _ = runMain(t, other, "requeue", "--status", "rejected", "--all")
	if code != ExitFailure || !strings.Contains(out, "names no such source") {
		t.Fatalf("requeue with a file without the source: exit %d\n%s", code, out)
	}

	// The daemon's file: the source's rules still find no type.
	same := withSources("sources:\n  - {name: pay, verify: standard-webhooks, secret_file: $SECRET}\n")
	code, out, _ = runMain(t, same, "requeue", "--status", "rejected", "--all")
	if code != ExitFailure || !strings.Contains(out, "id "+itoa(id)+": still rejected with the current configuration: missing event type (JSON field type)") {
		t.Fatalf("requeue by the source's rules: exit %d\n%s", code, out)
	}
	if n := attacker(); n != 0 {
		t.Fatalf("%d rows under the unsigned headers' id or type", n)
	}

	// The console's requeue applies the same rules: without the sources
	// file the row stays; with one whose source gives a type, it is
	// requeued under the id that was signed.
	fixed := withSources("sources:\n  - {name: pay, verify: standard-webhooks, secret_file: $SECRET, event_type: {value: payment.refund}}\n")
	requeue := url.Values{"status": {"rejected"}, "id": {itoa(id)}, "confirm": {"yes"}}
	startConsole(t, base)(requeue)
	if n := attacker(); n != 0 {
		t.Fatal("the console requeued the row under the unsigned headers' id or type")
	}
	startConsole(t, fixed)(requeue)
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox
		WHERE id = $1 AND status = 'received' AND event_id = 'msg_signed_1' AND event_type = 'payment.refund'`, id).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the console's requeue: the row is not received as msg_signed_1, payment.refund (%v)", err)
	}
}
