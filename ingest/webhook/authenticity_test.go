package webhook

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// eventIDs returns the event ids of source's rows, in id order.
func (b *whBundle) eventIDs(t *testing.T, source string) []string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT event_id FROM inbox WHERE source = $1 ORDER BY id", source)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// signGitHub is the X-Hub-Signature-256 of body under secret.
func signGitHub(secret string, body []byte) string { return "sha256=" + signHex(secret, body) }

// A header that a scheme's signature check or a source's mapping reads is
// refused when it comes twice, never joined: a captured Standard Webhooks
// request replayed with a second webhook-id (which Header.Get never
// checked) used to store "msg_…, r1" as a new event.
func TestWebhookRepeatedReadHeaderIsRefused(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, nil, nil)
	body := []byte(`{"type":"order.paid","order":"o-1"}`)
	now := time.Now()
	if resp, out := b.post(t, "std", stdRequest(t, "msg_1", body, now), body); resp.StatusCode != 200 {
		t.Fatalf("the captured request: %d %s", resp.StatusCode, out)
	}
	with := func(h http.Header, name string, values ...string) http.Header {
		h = h.Clone()
		h[http.CanonicalHeaderKey(name)] = append(h[http.CanonicalHeaderKey(name)], values...)
		return h
	}
	for _, tc := range []struct {
		name, source string
		h            http.Header
		body         []byte
		code         int
	}{
		{"second webhook-id", "std", with(stdRequest(t, "msg_1", body, now), "webhook-id", "r1"), body, 401},
		{"third webhook-id", "std", with(stdRequest(t, "msg_1", body, now), "webhook-id", "r2"), body, 401},
		{"second webhook-id first", "std", with(http.Header{"Webhook-Id": {"r3"}, "Webhook-Timestamp": {strconv.FormatInt(now.Unix(), 10)},
			"Webhook-Signature": {signStandard(t, specSecret, "msg_1", now.Unix(), body)}}, "webhook-id", "msg_1"), body, 401},
		{"second webhook-timestamp", "std", with(stdRequest(t, "msg_1", body, now), "webhook-timestamp", "1"), body, 401},
		{"second webhook-signature", "std", with(stdRequest(t, "msg_1", body, now), "webhook-signature", "v1,AAAA"), body, 401},
		{"second svix-id", "std", with(http.Header{"Svix-Id": {"msg_1"}, "Svix-Timestamp": {strconv.FormatInt(now.Unix(), 10)},
			"Svix-Signature": {signStandard(t, specSecret, "msg_1", now.Unix(), body)}}, "svix-id", "r4"), body, 401},
		{"second github signature", "gh", with(http.Header{"X-Hub-Signature-256": {githubSignature}, "X-Github-Event": {"push"}},
			"X-Hub-Signature-256", githubSignature), []byte(githubBody), 401},
		{"second github event", "gh", with(http.Header{"X-Hub-Signature-256": {githubSignature}, "X-Github-Event": {"push"}},
			"X-Github-Event", "release"), []byte(githubBody), 400},
		{"second hmac signature", "hm", with(http.Header{"X-Signature": {"sha256=" + signHex("s3cret", []byte(`{"id":"h9"}`))}},
			"X-Signature", "sha256=00"), []byte(`{"id":"h9"}`), 401},
		{"second id header", "open", with(http.Header{"X-Event-Id": {"o1"}, "X-Event-Type": {"t"}}, "X-Event-Id", "o2"), []byte("x"), 400},
		{"second key header", "open", with(http.Header{"X-Event-Id": {"o1"}, "X-Event-Type": {"t"}, "X-Key": {"k1"}}, "X-Key", "k2"), []byte("x"), 400},
	} {
		if resp, out := b.post(t, tc.source, tc.h, tc.body); resp.StatusCode != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, out, tc.code)
		}
	}
	if ids := b.eventIDs(t, "std"); len(ids) != 1 || ids[0] != "msg_1" {
		t.Fatalf("std rows %q, want only the signed msg_1", ids)
	}
	if n := b.count(t, "source <> 'std'"); n != 0 {
		t.Fatalf("%d rows from refused requests", n)
	}
	var stored string
	if err := b.pool.QueryRow(t.Context(), "SELECT headers->>'webhook-id' FROM inbox WHERE source = 'std'").Scan(&stored); err != nil || stored != "msg_1" {
		t.Fatalf("stored webhook-id %q (%v), want exactly the signed msg_1", stored, err)
	}
	if got := testutil.ToFloat64(b.src.wm.verifyFailures.WithLabelValues("std", VerifyRepeatedHeader)); got != 6 {
		t.Errorf("repeated_header failures of std = %v, want 6", got)
	}
}

// github and hmac-sha256 sign the body alone: nothing in their headers is
// authentic. By default a github source's event id is the body's hash, so
// a captured body replayed under new X-GitHub-Delivery values (or another
// X-GitHub-Event) is a duplicate of its first delivery; and a source that
// takes an id, a type or a key from an unsigned header is refused at start
// unless it says so.
func TestWebhookBodyOnlySignatureDecidesTheRow(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, nil, nil)
	body := []byte(`{"action":"completed","check_run":{"id":4}}`)
	for i, event := range []string{"push", "push", "push", "release"} {
		h := http.Header{"X-Hub-Signature-256": {signGitHub(githubSecret, body)}, "X-Github-Delivery": {fmt.Sprintf("d-%d", i)},
			"X-Github-Event": {event}}
		if resp, out := b.post(t, "gh", h, body); resp.StatusCode != 200 {
			t.Fatalf("delivery %d: %d %s", i, resp.StatusCode, out)
		}
	}
	sum := sha256.Sum256(body)
	if ids := b.eventIDs(t, "gh"); len(ids) != 1 || ids[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("github rows %q, want one, the body's hash", ids)
	}
	if n := b.count(t, "source = 'gh' AND event_type = 'push' AND headers->>'x-github-delivery' = 'd-0'"); n != 1 {
		t.Fatal("the row is not the first delivery's")
	}

	// At start: an unsigned id, type or key without its allowance.
	for _, tc := range []struct {
		name string
		src  SourceConfig
		want []string
	}{
		{"github, type header not allowed", SourceConfig{Name: "g", Verify: GitHub, Secrets: []string{"s"}},
			[]string{"event_type: header X-GitHub-Event is not signed", "unsigned_type: allow"}},
		{"github, delivery id", SourceConfig{Name: "g", Verify: GitHub, Secrets: []string{"s"}, UnsignedType: true,
			EventID: Field{Header: "X-GitHub-Delivery"}}, []string{"event_id: header X-GitHub-Delivery is not signed", "unsigned_id: allow"}},
		{"hmac, all from headers", SourceConfig{Name: "h", Verify: HMAC, Header: "X-Sig", Secrets: []string{"s"},
			EventID: Field{Header: "X-Id"}, EventType: Field{Header: "X-Type"}, Key: Field{Header: "X-Key"}},
			[]string{"event_id: header X-Id", "event_type: header X-Type", "key: header X-Key"}},
		{"standard, type header", SourceConfig{Name: "s", Verify: Standard, Secrets: []string{specSecret},
			EventType: Field{Header: "X-Type"}}, []string{"event_type: header X-Type is not signed (standard-webhooks signs webhook-id"}},
		{"allowance for a signed field", SourceConfig{Name: "s", Verify: Standard, Secrets: []string{specSecret},
			UnsignedID: true}, []string{"unsigned_id: allow, but event_id is not taken from an unsigned header"}},
		{"allowance under none", SourceConfig{Name: "n", Verify: None, EventID: Field{Header: "a"},
			EventType: Field{Header: "b"}, UnsignedType: true}, []string{"unsigned_type: verify none signs nothing"}},
	} {
		_, err := newWebhook(Config{Addr: "127.0.0.1:0", Sources: []SourceConfig{tc.src}}, b.w, b.src.Log, nil)
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %v, want it to say %q", tc.name, err, want)
			}
		}
	}

}

// replaySources are the sources of the replay-window tests: github ids
// from the unsigned X-GitHub-Delivery, allowed, bounded by a window.
func replaySources(c *Config) {
	c.Sources = append(c.Sources, SourceConfig{Name: "ghd", Verify: GitHub, Secrets: []string{githubSecret},
		EventID: Field{Header: "X-GitHub-Delivery"}, UnsignedID: true, UnsignedType: true, ReplayWindow: time.Hour})
}

// With replay_window, a body already accepted under one event id is
// refused under another for the window's length, on every replica (the
// table decides): a captured github body replayed under new
// X-GitHub-Delivery values stores nothing, to whichever replica it goes,
// also when the copies arrive at once; the sender's own retry (the same
// delivery id) is a duplicate as always; once the window has passed, the
// body is accepted again, and maintenance deletes the records that no
// longer refuse anything. Sources without a window write no record.
func TestWebhookReplayWindowAcrossReplicas(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	a := setupWebhook(t, db.Pool, replaySources)
	b := setupWebhook(t, db.Pool, replaySources)
	deliver := func(r *whBundle, delivery string, body []byte) string {
		h := http.Header{"X-Hub-Signature-256": {signGitHub(githubSecret, body)}, "X-Github-Delivery": {delivery}, "X-Github-Event": {"push"}}
		resp, out := r.post(t, "ghd", h, body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", delivery, resp.StatusCode, out)
		}
		var v struct{ Status string }
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%s: %q: %v", delivery, out, err)
		}
		return v.Status
	}
	body := []byte(`{"ref":"refs/heads/main","after":"a1"}`)
	for _, step := range []struct {
		replica      *whBundle
		delivery     string
		body         []byte
		status, name string
	}{
		{a, "d-1", body, "stored", "first delivery"},
		{b, "d-2", body, "replay", "replayed to the other replica"},
		{a, "d-3", body, "replay", "replayed to the same replica"},
		{b, "d-1", body, "stored", "the sender's retry, to the other replica"},
		{a, "d-4", []byte(`{"ref":"refs/heads/main","after":"a2"}`), "stored", "another body"},
	} {
		if got := deliver(step.replica, step.delivery, step.body); got != step.status {
			t.Errorf("%s: %s, want %s", step.name, got, step.status)
		}
	}
	if ids := a.eventIDs(t, "ghd"); strings.Join(ids, " ") != "d-1 d-4" {
		t.Fatalf("rows %q, want d-1 d-4", ids)
	}

	// Copies of one body at once, half to each replica: one row.
	concurrent := []byte(`{"ref":"refs/heads/main","after":"a3"}`)
	var wg sync.WaitGroup
	statuses := make([]string, 16)
	for i := range statuses {
		r := a
		if i%2 == 1 {
			r = b
		}
		wg.Go(func() { statuses[i] = deliver(r, fmt.Sprintf("c-%d", i), concurrent) })
	}
	wg.Wait()
	if n := a.count(t, "source = 'ghd' AND payload = $1", concurrent); n != 1 {
		t.Fatalf("16 copies at once: %d rows (%v), want 1", n, statuses)
	}
	replays := testutil.ToFloat64(a.src.wm.replays.WithLabelValues("ghd")) + testutil.ToFloat64(b.src.wm.replays.WithLabelValues("ghd"))
	if replays != 2+15 {
		t.Errorf("replays_total = %v, want 17", replays)
	}

	// The window passes (the records age by two hours): accepted again.
	if _, err := db.Pool.Exec(t.Context(), "UPDATE webhook_replays SET seen_at = seen_at - interval '2 hours' WHERE body_sha256 <> $1",
		sha256sum(concurrent)); err != nil {
		t.Fatal(err)
	}
	if got := deliver(b, "d-5", body); got != "stored" {
		t.Fatalf("after the window: %s, want stored", got)
	}
	// Maintenance deletes the aged record (d-4's body), keeps the live
	// ones (d-5's, the concurrent body's).
	n, err := a.src.replays.prune(t.Context(), "ghd", time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("prune: %d, %v; want 1", n, err)
	}
	var left int
	if err := db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM webhook_replays").Scan(&left); err != nil || left != 2 {
		t.Fatalf("%d records left (%v), want 2", left, err)
	}
	// No record for a source without a window.
	std := []byte(`{"type":"t"}`)
	if resp, _ := a.post(t, "std", stdRequest(t, "msg_w", std, time.Now()), std); resp.StatusCode != 200 {
		t.Fatal("std request refused")
	}
	if err := db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM webhook_replays WHERE source <> 'ghd'").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d records of sources without a window (%v)", left, err)
	}
}

func sha256sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// Real senders sign with the npm svix and standardwebhooks libraries:
// Svix's default svix-* headers and the white-labelled webhook-* ones, a
// whsec_ secret without its base64 padding and a bare base64 secret (no
// whsec_) are each accepted and stored once (every delivery sent twice);
// a request mixing the two header families is refused.
func TestWebhookInteropSvixAndStandardWebhooks(t *testing.T) {
	t.Parallel()
	node := testkit.NodeInterop(t)
	key := []byte("interop-key-0123456789abcdefghij") // 32 bytes: base64 ends in one '='
	padded := base64.StdEncoding.EncodeToString(key)
	if !strings.HasSuffix(padded, "=") {
		t.Fatal("the key's base64 has no padding to leave out")
	}
	unpadded := "whsec_" + strings.TrimRight(padded, "=")
	srcs := []SourceConfig{
		{Name: "svix", Verify: Standard, Secrets: []string{"whsec_" + padded}},
		{Name: "unpadded", Verify: Standard, Secrets: []string{unpadded}},
		{Name: "bare", Verify: Standard, Secrets: []string{padded}},
	}
	for _, sc := range srcs {
		if p := sc.withDefaults().problems(); len(p) > 0 {
			t.Fatalf("the secrets the libraries accept: %s: %v", sc.Name, p)
		}
	}
	b := setupWebhook(t, nil, func(c *Config) { c.Sources = srcs })
	out := node.Run(t, 2*time.Minute, "webhook_sign.js", []string{"BASE=" + b.base, "SECRET=whsec_" + padded,
		"SECRET_UNPADDED=" + unpadded, "SECRET_BARE=" + padded})
	got := map[string][]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var line struct {
			Case   string
			Status int
			Body   string
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("script output %q: %v", sc.Text(), err)
		}
		got[line.Case] = append(got[line.Case], line.Status)
	}
	for c, rows := range map[string]struct{ source, id string }{
		"svix-default": {"svix", "msg_svix_default"}, "white-labelled": {"svix", "msg_white_labelled"},
		"unpadded": {"unpadded", "msg_unpadded"}, "unpadded-svix": {"unpadded", "msg_unpadded_svix"},
		"bare": {"bare", "msg_bare"}, "bare-standard": {"bare", "msg_bare_standard"},
	} {
		if fmt.Sprint(got[c]) != "[200 200]" {
			t.Errorf("%s: answers %v, want [200 200]", c, got[c])
		}
		if n := b.count(t, "source = $1 AND event_id = $2 AND event_type = 'invoice.paid' AND status = 'received'", rows.source, rows.id); n != 1 {
			t.Errorf("%s: %d rows, want 1", c, n)
		}
	}
	for _, c := range []string{"mixed", "mixed-signature"} {
		if fmt.Sprint(got[c]) != "[401]" {
			t.Errorf("%s: answers %v, want [401]", c, got[c])
		}
	}
	if n := b.count(t, "event_id LIKE 'msg_mixed%'"); n != 0 {
		t.Errorf("%d rows from a mixed request", n)
	}
	if got := testutil.ToFloat64(b.src.wm.verifyFailures.WithLabelValues("svix", VerifyMixedHeaders)); got != 2 {
		t.Errorf("mixed_headers failures = %v, want 2", got)
	}
	if n := b.count(t, "headers ? 'svix-signature' OR headers ? 'webhook-signature'"); n != 0 {
		t.Errorf("%d rows store a signature", n)
	}
}

// Header values whose names look like credentials (sensitive's rule) are
// not stored with a webhook row, unless the source keeps them by name;
// the headers the mapping reads are stored whatever their names, hop-by-hop
// headers and signatures never.
func TestWebhookCredentialHeadersNotStored(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, nil, func(c *Config) {
		c.Sources = append(c.Sources, SourceConfig{Name: "kept", Verify: None, EventID: Field{Header: "X-Delivery-Token"},
			EventType: Field{Value: "t"}, KeepHeaders: []string{"X-Api-Key"}})
	})
	creds := http.Header{"X-Api-Key": {"sk_live_123"}, "X-Auth-Token": {"tok"}, "Authorization": {"Bearer x"}, "Cookie": {"s=1"},
		"X-Client-Secret": {"cs"}, "Proxy-Authorization": {"Basic y"}, "X-Trace": {"tr-1"}}
	for _, source := range []string{"open", "kept"} {
		h := creds.Clone()
		h.Set("X-Event-Id", "o-"+source)
		h.Set("X-Event-Type", "t")
		h.Set("X-Delivery-Token", "o-"+source)
		if resp, out := b.post(t, source, h, []byte("x")); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", source, resp.StatusCode, out)
		}
	}
	headersOf := func(source string) map[string]string {
		var raw []byte
		if err := b.pool.QueryRow(t.Context(), "SELECT headers FROM inbox WHERE source = $1", source).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	open, kept := headersOf("open"), headersOf("kept")
	for _, name := range []string{"x-api-key", "x-auth-token", "authorization", "cookie", "x-client-secret", "proxy-authorization", "x-delivery-token"} {
		if v, ok := open[name]; ok {
			t.Errorf("open: %s stored (%q)", name, v)
		}
	}
	if open["x-trace"] != "tr-1" || open["x-event-id"] != "o-open" {
		t.Errorf("open: headers %v", open)
	}
	if kept["x-api-key"] != "sk_live_123" || kept["x-delivery-token"] != "o-kept" {
		t.Errorf("kept: the kept and the mapped headers are not stored: %v", kept)
	}
	if _, ok := kept["x-auth-token"]; ok {
		t.Errorf("kept: x-auth-token stored although not kept")
	}
	// keep_headers names a credential, never a signature nor anything else.
	for _, tc := range []struct{ keep, want string }{
		{"X-Trace", "does not look like a credential"},
		{"X-Hub-Signature-256", "carries the signature"},
		{"Connection", "is a hop-by-hop header"},
	} {
		err := Config{Addr: ":1", Sources: []SourceConfig{{Name: "g", Verify: GitHub, Secrets: []string{"s"},
			UnsignedType: true, KeepHeaders: []string{tc.keep}}}}.withDefaults().validate()
		if err == nil || !strings.Contains(err.Error(), "keep_headers: "+tc.keep+" "+tc.want) {
			t.Errorf("keep_headers %s: %v", tc.keep, err)
		}
	}
}

// The Standard Webhooks secrets that the reference libraries accept are
// accepted, and give their key: whsec_ with or without base64 padding, and
// bare base64. What no library reads as a key is refused.
func TestStandardSecretAsTheLibrariesRead(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	padded := base64.StdEncoding.EncodeToString(key)
	raw := strings.TrimRight(padded, "=")
	for _, s := range []string{"whsec_" + padded, "whsec_" + raw, padded, raw} {
		got, err := standardSecret(s)
		if err != nil || !hmac.Equal(got, key) {
			t.Errorf("%q: %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"whsec_", "", "whsec_a", "whsec_not base64!", "whsec_" + raw + "===", "whsec_" + raw[:10] + "-" + raw[11:]} {
		if _, err := standardSecret(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// A webhook source's rejected row is mapped again by its source's rules
// (the signed id, the JSON type), never by the brokers' (the unsigned
// event_id and event_type headers the request carried); without the
// source's rules it stays rejected and says why.
func TestRemapRejectedWebhookRowUsesItsSourceRules(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, nil, nil)
	body := []byte(`{"data":{}}`)
	h := stdRequest(t, "msg_r", body, time.Now())
	h.Set("Event_id", "chosen")
	h.Set("Event_type", "refund.issued")
	if resp, out := b.post(t, "std", h, body); resp.StatusCode != 200 || !strings.Contains(out, "missing_type") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	var eventID string
	var payload, headers []byte
	if err := b.pool.QueryRow(t.Context(), "SELECT event_id, payload, headers FROM inbox WHERE source = 'std'").Scan(&eventID, &payload, &headers); err != nil {
		t.Fatal(err)
	}
	var hm map[string]string
	if err := json.Unmarshal(headers, &hm); err != nil {
		t.Fatal(err)
	}
	m := kafka.Message{Topic: "std", Value: payload}
	for k, v := range hm {
		m.Headers = append(m.Headers, kafka.Header{Key: k, Value: []byte(v)})
	}
	if row := remapRejected(eventID, m, ingest.MapOptions{}); row.Status != ingestcore.StatusRejected || !strings.Contains(row.LastError, "INBOXD_WEBHOOK_SOURCES is not set") {
		t.Fatalf("without the webhook sources: %+v", row)
	}
	srcs := testWebhookSources()
	if row := remapRejectedRow(eventID, m, ingest.MapOptions{}, srcs); row.Status != ingestcore.StatusRejected || row.Reason != ingestcore.RejectMissingType {
		t.Fatalf("by its source's rules: %+v", row)
	}
	srcs[0].EventType = Field{Value: "payment.refund"}
	if row := remapRejectedRow(eventID, m, ingest.MapOptions{}, srcs); row.Status != ingestcore.StatusReceived || row.EventID != "msg_r" || row.EventType != "payment.refund" {
		t.Fatalf("with a type: %+v", row)
	}
}

// Secrets that start with '#', and a rotation of two (as the sources file
// gives them: webhookfile's TestWebhookSecretFilesCarryAnySecret):
// requests signed with either secret are accepted; with another, refused.
func TestWebhookSecretsRotate(t *testing.T) {
	t.Parallel()
	const hashSecret, newSecret = "#hash-first-secret", "the-new-secret"
	one := []SourceConfig{
		{Name: "g1", Verify: GitHub, UnsignedType: true, Secrets: []string{hashSecret}},
		{Name: "g2", Verify: GitHub, UnsignedType: true, Secrets: []string{hashSecret, newSecret}},
	}
	b := setupWebhook(t, nil, func(c *Config) { c.Sources = one })
	for i, tc := range []struct {
		source, secret string
		code           int
	}{{"g1", hashSecret, 200}, {"g2", hashSecret, 200}, {"g2", newSecret, 200}, {"g1", newSecret, 401}} {
		body := fmt.Appendf(nil, `{"n":%d}`, i)
		h := http.Header{"X-Hub-Signature-256": {signGitHub(tc.secret, body)}, "X-Github-Event": {"ping"}}
		if resp, out := b.post(t, tc.source, h, body); resp.StatusCode != tc.code {
			t.Errorf("%s signed with %q: %d %s, want %d", tc.source, tc.secret, resp.StatusCode, out, tc.code)
		}
	}
}
