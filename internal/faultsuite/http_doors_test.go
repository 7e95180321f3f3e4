package faultsuite

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/inboxd/inboxd/ingest/webhook"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// doors is a scenario of the HTTP doors: a per-test database, a sink, the
// run, and cmd/inboxd (binary) with the standard-webhooks source
// webhookSource only and an http route of webhookEventType to the sink;
// url is the source's endpoint.
type doors struct {
	db     *pgtest.DB
	run    *Run
	d      *Daemon
	addr   string
	url    string
	secret WebhookSecret
}

// startDoors starts the scenario's daemon.
func startDoors(t *testing.T, binary string) doors {
	t.Helper()
	db := sharedDB(t)
	sink := NewSink(t)
	s := doors{db: db, run: NewRun(t, db.Pool, sink, 30*time.Second), secret: NewWebhookSecret(t), addr: testkit.FreeAddr(t)}
	routes := writeRoutes(t, httpRoute(sink, webhookEventType))
	env := baseEnv(db.URL, 30*time.Second, 4, "INBOXD_ROUTES="+routes,
		"INBOXD_WEBHOOK_ADDR="+s.addr, "INBOXD_WEBHOOK_SOURCES="+writeWebhookSources(t, webhookSource, s.secret))
	s.d = StartDaemon(t, DaemonSpec{Name: "a", Binary: binary, Env: env})
	s.url = "http://" + s.addr + webhook.PathPrefix + webhookSource
	return s
}

// forgedHead is the head of an unauthenticated webhook request declaring a
// body of length bytes: Standard Webhooks headers with a signature no
// secret made.
func forgedHead(length int) []byte {
	return RequestHead("POST", webhook.PathPrefix+webhookSource, length, false,
		"Content-Type: application/json", "webhook-id: msg_forged",
		"webhook-timestamp: "+strconv.FormatInt(time.Now().Unix(), 10),
		"webhook-signature: v1,Zm9yZ2VkIHNpZ25hdHVyZSBvZiBub2JvZHk=")
}

// signedUntilStored POSTs a correctly signed event to url, again every
// 100 ms after any other answer than 200, until it is stored; it returns
// the time from the first attempt to the 200, the attempts and the last
// failure.
func signedUntilStored(t *testing.T, url string, secret WebhookSecret, id string, timeout time.Duration) (time.Duration, int, string) {
	t.Helper()
	body := fmt.Appendf(nil, `{"type":%q,"id":%q}`, webhookEventType, id)
	start := time.Now()
	last := ""
	for n := 1; time.Since(start) < timeout; n++ {
		code, _, err := signedPost(url, secret, id, body, 10*time.Second)
		if err == nil && code == 200 {
			return time.Since(start), n, last
		}
		last = fmt.Sprintf("%d %v", code, err)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("a correctly signed request was not stored within %s: last answer %s", timeout, last)
	return 0, 0, ""
}

// Scenario (issue 25, item 7): unauthenticated memory exhaustion. 1,024
// connections (4,096 in the long variant) each declare a body of
// max_body's default (1 MiB), send it one byte short and hold: unbounded,
// that took the daemon from 38 MB to 1.24 GB RSS in 6 s. The bodies in
// hand share INBOXD_WEBHOOK_BODY_BUDGET (default 64 MiB): a request beyond
// it is answered 503 with Retry-After before its body is read, and the
// daemon's peak RSS (VmHWM, a binary built without -race) stays under the
// budget plus webhook.BodyOverhead. A correctly signed (small)
// request is stored while the attack holds its connections; the held
// bodies are cut once they stall (webhook.DefaultBodyStall), and none
// of the forged requests is stored.
func TestWebhookBodyFloodBoundedMemory(t *testing.T) {
	scenario(t, alone)
	s := startDoors(t, bins.InboxdNoRace)
	db, run, d, addr, url, secret := s.db, s.run, s.d, s.addr, s.url, s.secret
	// One signed event before the attack: the daemon is warm.
	signedUntilStored(t, url, secret, "before", 30*time.Second)
	rest, _ := d.PeakRSS()

	conns, size := pick(1024, 4096), webhook.DefaultMaxBody
	budget := int64(webhook.DefaultBodyBudget)
	limit := budget + webhook.BodyOverhead
	var peak int64
	sample := func() {
		if v, err := d.PeakRSS(); err == nil {
			peak = max(peak, v)
		}
	}
	held := func() float64 {
		m, err := d.Metrics()
		if err != nil {
			return -1
		}
		return m.Value("inboxd_webhook_body_bytes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attack := &ConnAttack{Addr: addr, N: conns, Head: forgedHead(size), Body: bytes.Repeat([]byte{'x'}, size-1)}
	run.OnFailure(attack.Describe)
	started := time.Now()
	attack.Start(ctx)
	// Every connection has written its body (read by the daemon, or
	// refused and closed); the attack then holds what got in.
	WaitFor(t, scale(90*time.Second), "every forged body written or refused", func() bool {
		sample()
		return attack.Written() == conns
	})
	loaded := time.Now()
	heldAtLoad := held()
	took, attempts, lastRefusal := signedUntilStored(t, url, secret, "during", scale(60*time.Second))
	// The held bodies are cut by the stall limit while their connections
	// stay open: the memory they held comes back.
	WaitFor(t, webhook.DefaultBodyStall+scale(20*time.Second), "the held bodies cut", func() bool {
		sample()
		return held() == 0
	})
	cutAfter := time.Since(loaded)
	sample()
	m, err := d.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	attack.Stop()
	run.Expect(webhookSource, "before", "during")
	run.WaitProcessed(scale(30 * time.Second))
	run.Check()

	refused := m.Value("inboxd_webhook_requests_total", "source", webhookSource, "code", "503")
	stalled := m.Value("inboxd_webhook_body_refusals_total", "reason", "stalled")
	run.Note("conns=%d body=%dB loaded_in=%s rest_rss=%dMiB peak_rss=%dMiB budget=%dMiB limit=%dMiB held_at_load=%.1fMiB refused_503=%.0f cut_stalled=%.0f held_cut_after=%s signed_stored_in=%s (%d attempts, last refusal %q)",
		conns, size, loaded.Sub(started).Round(time.Millisecond), rest>>20, peak>>20, budget>>20, limit>>20, heldAtLoad/(1<<20),
		refused, stalled, cutAfter.Round(time.Millisecond), took.Round(time.Millisecond), attempts, lastRefusal)
	if peak > limit {
		t.Errorf("MEMORY: peak RSS %d MiB under %d forged %d-byte bodies, limit %d MiB (budget %d MiB + %d MiB)",
			peak>>20, conns, size, limit>>20, budget>>20, webhook.BodyOverhead>>20)
	}
	if over := int64(conns)*int64(size) - budget; over > 0 && refused < float64(over/int64(size))/2 {
		t.Errorf("REFUSALS: %.0f requests answered 503, expected most of the %d beyond the budget", refused, over/int64(size))
	}
	if took > signedBound {
		t.Errorf("SIGNED: a signed request was stored %s after the attack was in, bound %s", took, signedBound)
	}
	if bound := webhook.DefaultBodyStall + 10*time.Second; cutAfter > bound {
		t.Errorf("HELD: the held bodies were cut %s after the attack was in, bound %s (the stall limit + 10 s)", cutAfter, bound)
	}
	if stalled == 0 {
		t.Errorf("no held body was cut as stalled")
	}
	if !d.Running() {
		t.Errorf("the daemon died: %s", d.ExitDescription())
	}
	var others int
	_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE event_id NOT IN ('before', 'during')`).Scan(&others)
	if others != 0 {
		t.Errorf("STORED: %d rows from forged requests", others)
	}
}

// Scenario (issue 25, item 8): slow bodies. 1,200 connections each send
// their headers and then one byte of body every 2 s, and connect again
// when cut: unbounded, they held the 1,024 requests cap and a correctly
// signed request was answered 503 for 20 s and more (GitHub does not
// retry). The request cap is taken only once a body is read and verified,
// and a body slower than INBOXD_WEBHOOK_MIN_BODY_RATE after
// webhook.DefaultBodyGrace is cut: every signed request sent during the
// attack is stored within signedBound, the daemon's probes answer within
// probeBound, and the trickling connections are cut within the grace plus
// one trickle period and a margin.
func TestWebhookSlowBodiesDoNotHoldTheCap(t *testing.T) {
	scenario(t, heavy)
	s := startDoors(t, bins.Inboxd)
	run, d, addr, url, secret := s.run, s.d, s.addr, s.url, s.secret

	const conns, every = 1200, 2 * time.Second // more than the 1,024 requests cap
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attack := &ConnAttack{Addr: addr, N: conns, Head: forgedHead(1024), TrickleEvery: every, Reconnect: true}
	run.OnFailure(attack.Describe)
	attack.Start(ctx)
	WaitFor(t, scale(30*time.Second), "the trickling connections open", func() bool { return attack.Open() >= conns*9/10 })

	signed, probes := serveUnderAttack(t, url, secret, "http://"+d.Addr(), scale(10*time.Second))
	// Every trickler of the first round has been cut by now (or is).
	WaitFor(t, scale(30*time.Second), "a round of trickling connections cut", func() bool { return attack.Ended() >= conns })
	lives := attack.Lives()
	attack.Stop()
	ids := make([]string, len(signed.ids))
	copy(ids, signed.ids)
	run.Expect(webhookSource, ids...)
	run.WaitProcessed(scale(30 * time.Second))
	run.Check()

	cutBound := webhook.DefaultBodyGrace + every + 3*time.Second
	run.Note("conns=%d trickle_every=%s signed=%d signed_max=%s probes=%d probe_max=%s cut_p50=%s cut_max=%s cut_bound=%s",
		conns, every, len(signed.ids), signed.max.Round(time.Millisecond), probes.n, probes.max.Round(time.Millisecond),
		quantile(lives, 0.5), quantile(lives, 1), cutBound)
	signed.check(t, "signed request")
	probes.check(t, "probe")
	if worst := quantile(lives, 0.99); worst > cutBound {
		t.Errorf("SLOW BODIES: the trickling connections lived up to %s (p99), bound %s", worst, cutBound)
	}
}

// Scenario (issue 25, item 10): idle connections against the daemon's
// HTTP server (/healthz, /readyz, /metrics, /ui/). It held 64 connections
// and had no read timeout: 64 requests with Content-Length: 100 and no
// body made /healthz time out for 75 s, and a liveness probe would have
// restarted the pod. Now 128 such requests and 128 connections that never
// finish their headers (four times the cap) are held, each opened again a
// second after the server closes it (an attacker that holds connections;
// a flood of new ones is another attack: docs/guarantees.md), while
// probes on fresh connections (as a kubelet makes them) must each answer
// within probeBound.
func TestHTTPIdleConnectionsDoNotBlockProbes(t *testing.T) {
	scenario(t, light)
	db := sharedDB(t)
	sink := NewSink(t)
	run := NewRun(t, db.Pool, sink, 30*time.Second)
	routes := writeRoutes(t, httpRoute(sink, "probe.test"))
	d := StartDaemon(t, DaemonSpec{Name: "a", Binary: bins.Inboxd, Env: baseEnv(db.URL, 30*time.Second, 4, "INBOXD_ROUTES="+routes)})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bodiless := &ConnAttack{Addr: d.Addr(), N: 128, Head: RequestHead("GET", "/healthz", 100, false), Reconnect: true, Pause: time.Second}
	headless := &ConnAttack{Addr: d.Addr(), N: 128, Head: RequestHead("GET", "/healthz", -1, true), Reconnect: true, Pause: time.Second}
	run.OnFailure(func() string { return "bodiless: " + bodiless.Describe() + "; headless: " + headless.Describe() })
	bodiless.Start(ctx)
	headless.Start(ctx)
	// The cap is reached: the server closes the attack's connections to
	// make room for the attack's next ones.
	WaitFor(t, scale(30*time.Second), "the cap reached by the idle connections", func() bool {
		return headless.Ended() >= 2*defaultHTTPMaxConns
	})
	probes := probeFor("http://"+d.Addr(), scale(10*time.Second))
	bodilessDone, headlessDone := bodiless.Describe(), headless.Describe()
	bodiless.Stop()
	headless.Stop()
	run.Note("idle_conns=%d probes=%d probe_max=%s bodiless=[%s] headless=[%s]",
		bodiless.N+headless.N, probes.n, probes.max.Round(time.Millisecond), bodilessDone, headlessDone)
	probes.check(t, "probe")
	run.Check()
}

// timings are the answers a run of requests got: how many, the slowest,
// and the failures (a status other than 200, an error, an answer later
// than bound).
type timings struct {
	bound    time.Duration
	n        int
	ids      []string
	max      time.Duration
	failures []string
}

// add records one answer.
func (tm *timings) add(what string, code int, took time.Duration, err error) {
	tm.n++
	tm.max = max(tm.max, took)
	if err != nil || code != 200 || took > tm.bound {
		tm.failures = append(tm.failures, fmt.Sprintf("%s: %d after %s (%v)", what, code, took.Round(time.Millisecond), err))
	}
}

// check fails t for every failure.
func (tm *timings) check(t *testing.T, what string) {
	t.Helper()
	if tm.n == 0 {
		t.Errorf("no %s was made", what)
	}
	if len(tm.failures) > 0 {
		t.Errorf("UNSERVED: %d of %d %ss not answered 200 within %s, e.g. %v",
			len(tm.failures), tm.n, what, tm.bound, tm.failures[:min(len(tm.failures), 5)])
	}
}

// How soon a probe and a correctly signed request must be answered under
// attack: the Kubernetes manifest's probe timeout (timeoutSeconds: 2), and
// half the 10 s GitHub gives a delivery (it does not retry).
const (
	probeBound  = 2 * time.Second
	signedBound = 5 * time.Second
)

// defaultHTTPMaxConns is the connection cap of the daemon's HTTP server
// (cmd/inboxd/app's httpMaxConns).
const defaultHTTPMaxConns = 64

// probeFor GETs /healthz, /readyz and /metrics of base in turn, each on a
// fresh connection, every 250 ms for d.
func probeFor(base string, d time.Duration) *timings {
	tm := &timings{bound: probeBound}
	paths := []string{"/healthz", "/readyz", "/metrics"}
	for start, i := time.Now(), 0; time.Since(start) < d; i++ {
		p := paths[i%len(paths)]
		code, took, err := timedGet(base+p, 10*time.Second)
		tm.add(p, code, took, err)
		time.Sleep(250 * time.Millisecond)
	}
	return tm
}

// serveUnderAttack sends a correctly signed event to url every 500 ms and
// probes base meanwhile, for d; it returns both timings.
func serveUnderAttack(t *testing.T, url string, secret WebhookSecret, base string, d time.Duration) (*timings, *timings) {
	t.Helper()
	probes := make(chan *timings, 1)
	go func() { probes <- probeFor(base, d) }()
	signed := &timings{bound: signedBound}
	for start, i := time.Now(), 0; time.Since(start) < d; i++ {
		id := fmt.Sprintf("signed-%03d", i)
		code, took, err := signedPost(url, secret, id, fmt.Appendf(nil, `{"type":%q}`, webhookEventType), 10*time.Second)
		signed.add(id, code, took, err)
		if err == nil && code == 200 {
			signed.ids = append(signed.ids, id)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return signed, <-probes
}
