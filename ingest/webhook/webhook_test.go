package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// recordingWriter is a PGWriter that remembers the size of each batch
// written.
type recordingWriter struct {
	ingestcore.PGWriter
	mu      sync.Mutex
	batches []int
}

func (w *recordingWriter) WriteBatch(ctx context.Context, rows []ingestcore.Row) (int, error) {
	n, err := w.PGWriter.WriteBatch(ctx, rows)
	if err == nil {
		w.mu.Lock()
		w.batches = append(w.batches, len(rows))
		w.mu.Unlock()
	}
	return n, err
}

func (w *recordingWriter) largest() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := 0
	for _, n := range w.batches {
		m = max(m, n)
	}
	return m
}

type whBundle struct {
	pool *pgxpool.Pool
	src  *webhookSource
	w    *recordingWriter
	base string
	logs *bytes.Buffer
	stop func() error
}

// testWebhookSources: one source per scheme.
func testWebhookSources() []SourceConfig {
	return []SourceConfig{
		{Name: "std", Verify: Standard, Secrets: []string{specSecret}, MaxBody: 4096},
		{Name: "gh", Verify: GitHub, Secrets: []string{githubSecret}, UnsignedType: true},
		{Name: "hm", Verify: HMAC, Header: "X-Signature", Prefix: "sha256=", Secrets: []string{"s3cret"},
			EventID: Field{JSON: "id"}, EventType: Field{Value: "thing.happened"}, Key: Field{JSON: "customer"}},
		{Name: "open", Verify: None, EventID: Field{Header: "X-Event-Id"},
			EventType: Field{Header: "X-Event-Type"}, Key: Field{Header: "X-Key"}},
	}
}

func setupWebhook(t testing.TB, pool *pgxpool.Pool, adjust func(*Config)) *whBundle {
	t.Helper()
	if pool == nil {
		pool = pgtest.New(t).Pool
	}
	cfg := Config{Addr: "127.0.0.1:0", Sources: testWebhookSources(), WriteTimeout: 3 * time.Second,
		Pipeline: ingest.PipelineConfig{RetryBackoffMin: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond,
			WriteTimeout: time.Second}}
	if adjust != nil {
		adjust(&cfg)
	}
	b := &whBundle{pool: pool, w: &recordingWriter{PGWriter: ingestcore.PGWriter{Pool: pool}}, logs: &bytes.Buffer{}}
	var mu sync.Mutex
	log := zerolog.New(lockedWriter{&mu, b.logs}).Level(zerolog.DebugLevel)
	src, err := newWebhook(cfg, b.w, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b.src = src
	b.stop = startSource(t, src.Run)
	testkit.WaitFor(t, 10*time.Second, "the webhook source listens", func() bool { return src.Ready() })
	b.base = "http://" + src.Addr() + PathPrefix
	return b
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (b *whBundle) post(t *testing.T, path string, h http.Header, body []byte) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, string(out)
}

func (b *whBundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM inbox WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func stdRequest(t testing.TB, id string, body []byte, at time.Time) http.Header {
	h := standardHeaders(id, strconv.FormatInt(at.Unix(), 10), signStandard(t, specSecret, id, at.Unix(), body))
	h.Set("Content-Type", "application/json")
	return h
}

func TestWebhookAnswers(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, nil, nil)
	now := time.Now()
	body := []byte(`{"type":"payment.succeeded","amount":12}`)

	// 200 after the commit: the row is there when the answer comes.
	resp, out := b.post(t, "std", stdRequest(t, "msg_a", body, now), body)
	if resp.StatusCode != 200 || !strings.Contains(out, `"stored"`) {
		t.Fatalf("valid: %d %s", resp.StatusCode, out)
	}
	var typ, headers string
	var payload []byte
	if err := b.pool.QueryRow(t.Context(), "SELECT event_type, payload, headers::text FROM inbox WHERE source = 'std' AND event_id = 'msg_a'").
		Scan(&typ, &payload, &headers); err != nil {
		t.Fatalf("row of an answered request: %v", err)
	}
	if typ != "payment.succeeded" || !bytes.Equal(payload, body) {
		t.Errorf("row: type %q payload %q", typ, payload)
	}
	if strings.Contains(headers, "webhook-signature") || !strings.Contains(headers, "webhook-id") {
		t.Errorf("headers kept: %s", headers)
	}

	// A duplicate: 200, one row.
	resp, _ = b.post(t, "std", stdRequest(t, "msg_a", body, now), body)
	if resp.StatusCode != 200 {
		t.Fatalf("duplicate: %d", resp.StatusCode)
	}
	if n := b.count(t, "source = 'std' AND event_id = 'msg_a'"); n != 1 {
		t.Fatalf("duplicate stored %d times", n)
	}

	// 401: bad signatures, nothing stored, nothing of the body logged.
	secretBody := []byte(`{"type":"x","card":"4242-SECRET-BODY"}`)
	bad := stdRequest(t, "msg_b", secretBody, now)
	bad.Set("webhook-signature", signStandard(t, "whsec_"+"d3Jvbmc=", "msg_b", now.Unix(), secretBody))
	stale := stdRequest(t, "msg_c", body, now.Add(-10*time.Minute))
	for name, h := range map[string]http.Header{"wrong secret": bad, "stale": stale, "unsigned": {}} {
		if resp, _ := b.post(t, "std", h, secretBody); resp.StatusCode != 401 {
			t.Errorf("%s: %d, want 401", name, resp.StatusCode)
		}
	}
	ghBad := http.Header{"X-Hub-Signature-256": {githubSignature}, "X-Github-Delivery": {"d1"}, "X-Github-Event": {"push"}}
	if resp, _ := b.post(t, "gh", ghBad, []byte("Hello, World?")); resp.StatusCode != 401 {
		t.Errorf("github tampered: %d", resp.StatusCode)
	}
	if n := b.count(t, "source <> 'open' AND event_id <> 'msg_a'"); n != 0 {
		t.Fatalf("%d rows stored from refused requests", n)
	}
	if strings.Contains(b.logs.String(), "SECRET-BODY") || strings.Contains(b.logs.String(), "MfKQ9r8") {
		t.Fatal("a body or a secret reached the logs")
	}
	if got := testutil.ToFloat64(b.src.wm.verifyFailures.WithLabelValues("std", VerifyStaleTimestamp)); got != 1 {
		t.Errorf("stale_timestamp failures = %v", got)
	}

	// GitHub's example, as GitHub sends it: the id is the body's hash,
	// the delivery's id is kept among the headers.
	gh := http.Header{"X-Hub-Signature-256": {githubSignature}, "X-Github-Delivery": {"72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		"X-Github-Event": {"push"}}
	if resp, out := b.post(t, "gh", gh, []byte(githubBody)); resp.StatusCode != 200 {
		t.Fatalf("github: %d %s", resp.StatusCode, out)
	}
	if n := b.count(t, "source = 'gh' AND event_id = 'sha256:' || encode(sha256(payload), 'hex') AND event_type = 'push' "+
		"AND headers->>'x-github-delivery' = '72d3162e-cc78-11e3-81ab-4c9367dc0958'"); n != 1 {
		t.Fatalf("github row: %d", n)
	}

	// hmac-sha256 with id and key from JSON, a fixed type.
	hb := []byte(`{"id":"h1","customer":"c-7"}`)
	if resp, out := b.post(t, "hm", http.Header{"X-Signature": {"sha256=" + signHex("s3cret", hb)}}, hb); resp.StatusCode != 200 {
		t.Fatalf("hmac: %d %s", resp.StatusCode, out)
	}
	if n := b.count(t, "source = 'hm' AND event_id = 'h1' AND event_type = 'thing.happened' AND key = 'c-7'"); n != 1 {
		t.Fatalf("hmac row: %d", n)
	}

	// 415: a JSON field is needed and the body is not JSON.
	nb := []byte("id=h2")
	if resp, _ := b.post(t, "hm", http.Header{"X-Signature": {"sha256=" + signHex("s3cret", nb)}}, nb); resp.StatusCode != 415 {
		t.Errorf("not JSON: %d, want 415", resp.StatusCode)
	}

	// A signed request without an id: a rejected row and a 200.
	rb := []byte(`{"customer":"c-8"}`)
	resp, out = b.post(t, "hm", http.Header{"X-Signature": {"sha256=" + signHex("s3cret", rb)}}, rb)
	if resp.StatusCode != 200 || !strings.Contains(out, "missing_id") {
		t.Fatalf("no id: %d %s", resp.StatusCode, out)
	}
	if n := b.count(t, "source = 'hm' AND status = 'rejected' AND last_error LIKE 'missing event id%'"); n != 1 {
		t.Fatalf("rejected rows: %d", n)
	}
	// Standard Webhooks without a type in its JSON body: rejected too.
	nt := []byte(`{"data":{}}`)
	if resp, out := b.post(t, "std", stdRequest(t, "msg_d", nt, now), nt); resp.StatusCode != 200 || !strings.Contains(out, "missing_type") {
		t.Fatalf("no type: %d %s", resp.StatusCode, out)
	}

	// verify: none, headers for everything.
	oh := http.Header{"X-Event-Id": {"o1"}, "X-Event-Type": {"t"}, "X-Key": {"k1"}, "Authorization": {"Bearer x"}}
	if resp, _ := b.post(t, "open", oh, []byte("plain text")); resp.StatusCode != 200 {
		t.Fatalf("none: %d", resp.StatusCode)
	}
	if n := b.count(t, "source = 'open' AND event_id = 'o1' AND key = 'k1' AND NOT headers ? 'authorization' AND headers ? 'x-event-id'"); n != 1 {
		t.Fatalf("none row: %d", n)
	}

	// 404, 405, 413.
	if resp, _ := b.post(t, "nope", nil, body); resp.StatusCode != 404 {
		t.Errorf("unknown source: %d", resp.StatusCode)
	}
	get, err := http.Get(b.base + "std")
	if err != nil {
		t.Fatal(err)
	}
	get.Body.Close()
	if get.StatusCode != 405 || get.Header.Get("Allow") != "POST" {
		t.Errorf("GET: %d Allow %q", get.StatusCode, get.Header.Get("Allow"))
	}
	big := bytes.Repeat([]byte("x"), 5000)
	if resp, _ := b.post(t, "std", stdRequest(t, "msg_big", big, now), big); resp.StatusCode != 413 {
		t.Errorf("big body: %d, want 413", resp.StatusCode)
	}
	for code, want := range map[string]float64{"200": 3, "401": 3, "413": 1, "405": 1} {
		if got := testutil.ToFloat64(b.src.wm.requests.WithLabelValues("std", code)); got != want {
			t.Errorf("requests{std,%s} = %v, want %v", code, got, want)
		}
	}
}

// Concurrent requests share batched inserts, and each is answered after
// its own batch's commit.
func TestWebhookConcurrentRequestsShareBatches(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, nil, func(c *Config) { c.Pipeline.Linger = 20 * time.Millisecond })
	const n = 64
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			body := fmt.Appendf(nil, `{"type":"t","n":%d}`, i)
			resp, _ := b.post(t, "std", stdRequest(t, fmt.Sprintf("c-%d", i), body, time.Now()), body)
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("request %d: %d", i, c)
		}
	}
	if got := b.count(t, "source = 'std'"); got != n {
		t.Fatalf("%d rows, want %d", got, n)
	}
	if b.w.largest() < 2 {
		t.Fatalf("no batch held more than one row: %v", b.w.batches)
	}
}

// While the database is unreachable requests are answered 503 with
// Retry-After; once it is back the sender's retries are stored, each once.
func TestWebhookDatabaseDownAnswers503(t *testing.T) {
	t.Parallel()
	pool, proxy := proxiedPool(t)
	b := setupWebhook(t, pool, func(c *Config) { c.WriteTimeout = 500 * time.Millisecond })
	body := func(i int) []byte { return fmt.Appendf(nil, `{"type":"t","n":%d}`, i) }

	send := func(i int) int {
		resp, _ := b.post(t, "std", stdRequest(t, fmt.Sprintf("d-%d", i), body(i), time.Now()), body(i))
		if resp.StatusCode == 503 && resp.Header.Get("Retry-After") == "" {
			t.Errorf("503 without Retry-After")
		}
		return resp.StatusCode
	}
	if c := send(0); c != 200 {
		t.Fatalf("before the outage: %d", c)
	}
	proxy.Cut()
	answered := map[int]bool{0: true}
	for i := 1; i <= 5; i++ {
		if c := send(i); c == 200 {
			t.Fatalf("request %d answered 200 while the database is down", i)
		} else if c != 503 {
			t.Fatalf("request %d: %d, want 503", i, c)
		}
	}
	if b.src.Ready() {
		t.Error("Ready during the outage")
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	// The sender retries until it gets a 200.
	testkit.WaitFor(t, 30*time.Second, "every retried request answered 200", func() bool {
		for i := 1; i <= 5; i++ {
			if !answered[i] && send(i) == 200 {
				answered[i] = true
			}
		}
		return len(answered) == 6
	})
	if n := b.count(t, "source = 'std'"); n != 6 {
		t.Fatalf("%d rows, want 6", n)
	}
}

// FuzzWebhookExtract: mapping a verified request never panics, always
// gives a row of the source, and a row received carries an id and a type
// from where the configuration says.
func FuzzWebhookExtract(f *testing.F) {
	f.Add([]byte(`{"id":"a","type":"b","customer":"c"}`), "h-id", "h-type", "k")
	f.Add([]byte(`{"id":12,"type":null}`), "", "", "")
	f.Add([]byte(`not json`), "\x00", "\xff", "")
	f.Add([]byte(`{"id":{"x":1},"type":["b"]}`), "x", "y", "z")
	srcs := testWebhookSources()
	wm, _ := newWebhookMetrics(nil)
	eps := []*webhookEndpoint{}
	for _, s := range append(srcs, SourceConfig{Name: "js", Verify: None,
		EventID: Field{JSON: "id"}, EventType: Field{JSON: "type"}, Key: Field{JSON: "customer"}}) {
		eps = append(eps, newWebhookEndpoint(s.withDefaults(), ingest.DefaultMapOptions(), wm))
	}
	f.Fuzz(func(t *testing.T, body []byte, id, typ, key string) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("X-GitHub-Delivery", id)
		h.Set("X-GitHub-Event", typ)
		h.Set("X-Event-Id", id)
		h.Set("X-Event-Type", typ)
		h.Set("X-Key", key)
		for _, e := range eps {
			row := e.mapRequest(h, body)
			if row.Source != e.cfg.Name {
				t.Fatalf("source %q", row.Source)
			}
			if !json.Valid(row.Headers) {
				t.Fatalf("headers not JSON: %q", row.Headers)
			}
			if row.Status == ingestcore.StatusReceived && (row.EventID == "" || row.EventType == "") {
				t.Fatalf("received row without id or type: %+v", row)
			}
			if row.Status == ingestcore.StatusRejected && !strings.HasPrefix(row.EventID, "rejected/sha256:") {
				t.Fatalf("rejected id %q", row.EventID)
			}
			if e.cfg.EventType.Value != "" && row.EventType != "" && row.EventType != e.cfg.EventType.Value {
				t.Fatalf("type %q, configured %q", row.EventType, e.cfg.EventType.Value)
			}
		}
	})
}
