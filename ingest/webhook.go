package ingest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/httpserve"
)

// WebhookPathPrefix is the path under which each webhook source listens:
// POST /webhooks/<name>.
const WebhookPathPrefix = "/webhooks/"

// webhookRetryAfter is the Retry-After of a 503, in seconds.
const webhookRetryAfter = "5"

// unknownWebhookSource is the source label of requests to no configured
// source (a name cannot start with '_').
const unknownWebhookSource = "_unknown"

// droppedWebhookHeaders are headers never stored with a row, whatever the
// scheme: credentials and hop-by-hop headers.
var droppedWebhookHeaders = []string{"authorization", "proxy-authorization", "cookie", "connection",
	"keep-alive", "transfer-encoding", "te", "upgrade"}

// WebhookSource receives webhooks over HTTP into the inbox table: each
// request is verified, mapped to its row and handed to the persist-then-ack
// pipeline shared with the brokers, and answered 200 only once the batch
// holding its row has committed (a duplicate too). Create it with
// NewWebhook and start it with Run; Ready, Addr and LastProgress may be
// called from any goroutine.
type WebhookSource struct {
	*pipeline

	cfg       WebhookConfig
	tls       *tls.Config
	endpoints map[string]*webhookEndpoint
	wm        *webhookMetrics

	in       chan *webhookItem // requests' rows, to fetch
	sem      chan struct{}     // a token per verified request waiting for its commit
	budget   *bodyBudget       // the bytes the bodies in hand may hold
	stopping chan struct{}     // closed when the pipeline takes no more rows
	addr     atomic.Pointer[string]

	mu      sync.Mutex
	pending []*webhookItem // fetched since the last seal
}

// webhookEndpoint is one configured source, ready to serve.
type webhookEndpoint struct {
	cfg      WebhookSourceConfig
	verifier webhookVerifier
	opts     MapOptions
	drop     []string // lower-case header names not stored
	needJSON bool

	requests   *prometheus.CounterVec // by code
	verifyFail *prometheus.CounterVec // by reason
	commitWait prometheus.Observer
}

// webhookItem is one request's row on its way through the pipeline; done
// is closed once its batch has committed.
type webhookItem struct {
	row  Row
	done chan struct{}
}

// NewWebhook validates cfg (after applying defaults) and returns a
// WebhookSource writing to pool. It does not listen: Run does. Metrics are
// registered with reg (nil registers none): the ingest metrics under
// source_kind=webhook, and inboxd_webhook_*.
func NewWebhook(cfg WebhookConfig, pool *pgxpool.Pool, logger zerolog.Logger, reg prometheus.Registerer) (*WebhookSource, error) {
	w, err := writerOn(pool, cfg.Pipeline.HandOff)
	if err != nil {
		return nil, err
	}
	return newWebhook(cfg, w, logger, reg)
}

func newWebhook(cfg WebhookConfig, w inboxWriter, logger zerolog.Logger, reg prometheus.Registerer) (*WebhookSource, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	wm, err := newWebhookMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("ingest: register metrics: %w", err)
	}
	s := &WebhookSource{cfg: cfg, tls: tc, wm: wm, endpoints: map[string]*webhookEndpoint{},
		in: make(chan *webhookItem), sem: make(chan struct{}, cfg.MaxRequests), stopping: make(chan struct{}),
		budget: newBodyBudget(cfg.Admission.BodyBudget, wm.bodyBytes, wm.bodyBudget)}
	base := cfg.Pipeline.Mapping.withDefaults()
	for _, sc := range cfg.Sources {
		s.endpoints[sc.Name] = newWebhookEndpoint(sc, base, wm)
	}
	wm.requests.WithLabelValues(unknownWebhookSource, "404")
	s.pipeline, err = newPipeline(SourceWebhook, cfg.Pipeline, w, logger, reg, s.Reachable)
	if err != nil {
		return nil, fmt.Errorf("ingest: register metrics: %w", err)
	}
	return s, nil
}

func newWebhookEndpoint(sc WebhookSourceConfig, base MapOptions, wm *webhookMetrics) *webhookEndpoint {
	e := &webhookEndpoint{cfg: sc, verifier: newWebhookVerifier(sc)}
	e.opts = MapOptions{EventIDHeaders: []string{}, EventTypeHeaders: []string{},
		EventIDJSONField: sc.EventID.JSON, EventTypeJSONField: sc.EventType.JSON,
		MaxPayload: sc.MaxBody, MaxHeaders: base.MaxHeaders}
	if sc.EventID.Header != "" {
		e.opts.EventIDHeaders = []string{strings.ToLower(sc.EventID.Header)}
	}
	if sc.EventType.Header != "" {
		e.opts.EventTypeHeaders = []string{strings.ToLower(sc.EventType.Header)}
	}
	e.drop = slices.Clone(droppedWebhookHeaders)
	for _, h := range e.verifier.signatureHeaders() {
		e.drop = append(e.drop, strings.ToLower(h))
	}
	e.needJSON = sc.EventID.JSON != "" || sc.EventType.JSON != "" || sc.Key.JSON != ""
	e.requests = wm.requests.MustCurryWith(prometheus.Labels{"source": sc.Name})
	for _, code := range webhookCodes {
		e.requests.WithLabelValues(code)
	}
	e.verifyFail = wm.verifyFailures.MustCurryWith(prometheus.Labels{"source": sc.Name})
	if sc.Verify != WebhookNone {
		for _, r := range verifyReasons {
			e.verifyFail.WithLabelValues(r)
		}
	}
	e.commitWait = wm.commitWait.WithLabelValues(sc.Name)
	return e
}

// Ready reports whether the source runs, listens, and its last batch write
// did not fail.
func (s *WebhookSource) Ready() bool { return s.ready() }

// Reachable reports whether the listener is up.
func (s *WebhookSource) Reachable() bool { return s.addr.Load() != nil }

// Addr returns the listener's address once Run listens, else "".
func (s *WebhookSource) Addr() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// LastProgress returns when a request's row was last fetched or a batch
// last written; zero before the first.
func (s *WebhookSource) LastProgress() time.Time { return s.progress() }

// Run listens on cfg.Addr and serves until ctx is cancelled; it returns
// nil then, and an error when it cannot listen (a start-up error) or the
// server fails. At shutdown the listener closes first, the requests in
// hand get their answers (their rows written within CloseTimeout), then
// the pipeline stops: a request whose row could not be written is
// answered 503, and the sender retries.
func (s *WebhookSource) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("INBOXD_WEBHOOK_ADDR: cannot listen on %s: %w", s.cfg.Addr, err)
	}
	srv := httpserve.New(s, httpserve.Limits{
		ReadHeader:     s.cfg.ReadHeaderTimeout,
		Read:           s.cfg.ReadTimeout,
		Write:          s.cfg.ReadTimeout + s.cfg.WriteTimeout + 5*time.Second,
		Idle:           s.cfg.IdleTimeout,
		MaxHeaderBytes: s.cfg.Pipeline.Mapping.withDefaults().MaxHeaders + 8<<10,
		MaxConns:       webhookMaxConns(s.cfg.MaxRequests),
	}, s.log)

	pctx, stopPipeline := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPipeline()
	pipeDone := make(chan error, 1)
	go func() {
		pipeDone <- s.runSession(pctx, webhookFetcher{s}, func() {}, func() {
			a := ln.Addr().String()
			s.addr.Store(&a)
			s.updateReady()
			names := make([]string, 0, len(s.endpoints))
			for n := range s.endpoints {
				names = append(names, n)
			}
			slices.Sort(names)
			s.log.Info().Str("addr", a).Bool("tls", s.tls != nil).Strs("sources", names).
				Int("max_requests", s.cfg.MaxRequests).Dur("write_timeout", s.cfg.WriteTimeout).
				Int64("body_budget", s.cfg.Admission.BodyBudget).Int("min_body_rate", s.cfg.Admission.MinBodyRate).
				Int("max_conns", webhookMaxConns(s.cfg.MaxRequests)).
				Int("batch_size", s.cfg.Pipeline.BatchSize).Msg("ingest starting: serving webhooks")
		}, func() {})
	}()
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.ServeTLSConfig(ln, s.tls) }()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveDone:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("webhook server: %w", err)
		}
		serveDone <- nil
	case err := <-pipeDone:
		runErr = err
		pipeDone <- err
	}
	// Stop taking requests; those in hand wait for their commits, which
	// the pipeline, still running, makes.
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.Pipeline.CloseTimeout)
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	cancel()
	<-serveDone
	s.addr.Store(nil)
	stopPipeline()
	<-pipeDone
	close(s.stopping) // stragglers are answered 503 at once
	return runErr
}

// ServeHTTP serves POST /webhooks/<name>.
func (s *WebhookSource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, WebhookPathPrefix)
	e := s.endpoints[name]
	if !ok || e == nil {
		s.wm.requests.WithLabelValues(unknownWebhookSource, "404").Inc()
		answer(w, http.StatusNotFound, `{"error":"unknown webhook source"}`)
		return
	}
	code := s.serve(w, r, e)
	e.requests.WithLabelValues(strconv.Itoa(code)).Inc()
}

// webhookCodes are the answers' codes: the code label's values.
var webhookCodes = []string{"200", "400", "401", "405", "408", "413", "415", "499", "503"}

// serve answers one request to e and returns the answer's code.
func (s *WebhookSource) serve(w http.ResponseWriter, r *http.Request, e *webhookEndpoint) int {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return answer(w, http.StatusMethodNotAllowed, `{"error":"only POST"}`)
	}
	if r.ContentLength > int64(e.cfg.MaxBody) {
		return answer(w, http.StatusRequestEntityTooLarge, `{"error":"body larger than max_body"}`)
	}
	// Nothing is held before the body is read but the connection; the
	// body is read under the budget and the pace, and only a verified
	// request takes a place of the cap (a slow or forged body never does).
	body, release, refused := s.readBody(w, r, e.cfg.MaxBody)
	if refused != nil {
		if refused.reason != "" {
			s.wm.bodyRefusals.WithLabelValues(refused.reason).Inc()
		}
		if refused.code == http.StatusServiceUnavailable {
			return unavailable(w, refused.why)
		}
		b, _ := json.Marshal(map[string]string{"error": refused.why})
		return answer(w, refused.code, string(b))
	}
	defer release()
	if reason := e.verifier.verify(r.Header, body, s.cfg.Now()); reason != "" {
		e.verifyFail.WithLabelValues(reason).Inc()
		s.log.Debug().Str("source", e.cfg.Name).Str("reason", reason).Str("remote", r.RemoteAddr).
			Msg("webhook refused: verification failed; nothing stored")
		return answer(w, http.StatusUnauthorized, `{"error":"verification failed"}`)
	}
	if e.needJSON && !jsonObject(body) {
		return answer(w, http.StatusUnsupportedMediaType, `{"error":"the body must be a JSON object"}`)
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		return unavailable(w, "too many requests at once")
	}
	if !s.writesOK.Load() {
		return unavailable(w, "the inbox cannot be written to")
	}
	it := &webhookItem{row: e.mapRequest(r.Header, body), done: make(chan struct{})}

	start := time.Now()
	timer := time.NewTimer(s.cfg.WriteTimeout)
	defer timer.Stop()
	select {
	case s.in <- it:
	case <-timer.C:
		return unavailable(w, "the inbox did not take the row in time")
	case <-s.stopping:
		return unavailable(w, "shutting down")
	case <-r.Context().Done():
		unavailable(w, "the client left")
		return 499 // nobody reads the answer
	}
	select {
	case <-it.done:
	case <-timer.C:
		return unavailable(w, "the row was not committed in time")
	case <-s.stopping:
		return unavailable(w, "shutting down")
	case <-r.Context().Done():
		unavailable(w, "the client left")
		return 499
	}
	e.commitWait.Observe(time.Since(start).Seconds())
	if it.row.Status == StatusRejected {
		return answer(w, http.StatusOK, `{"status":"rejected","reason":"`+string(it.row.Reason)+`"}`)
	}
	return answer(w, http.StatusOK, `{"status":"stored"}`)
}

// answer writes a JSON answer and returns its code.
func answer(w http.ResponseWriter, code int, body string) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body+"\n")
	return code
}

// unavailable answers 503 with Retry-After.
func unavailable(w http.ResponseWriter, why string) int {
	w.Header().Set("Retry-After", webhookRetryAfter)
	b, _ := json.Marshal(map[string]string{"error": why})
	return answer(w, http.StatusServiceUnavailable, string(b))
}

// jsonObject reports whether body is a JSON object.
func jsonObject(body []byte) bool {
	i := 0
	for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n') {
		i++
	}
	return i < len(body) && body[i] == '{' && json.Valid(body)
}

// mapRequest maps a verified request to its row by the shared mapping:
// id, type and key where e says, the headers (lower-case names, a repeated
// header's values joined by ", ", sorted) less the signature and
// credential headers. A request whose id or type is missing or unusable
// becomes a rejected row whose event id, "rejected/sha256:<hex of the
// body>", is the same when it is sent again.
func (e *webhookEndpoint) mapRequest(h http.Header, body []byte) Row {
	hs := webhookHeaders(h, e.drop)
	m := &Message{Source: e.cfg.Name, Value: body, Headers: hs, RejectID: webhookRejectID(body)}
	if e.cfg.EventType.Value != "" {
		m.EventType, m.EventTypeProperty = e.cfg.EventType.Value, "event_type value"
	}
	if e.opts.EventIDHeaders == nil || e.opts.EventTypeHeaders == nil {
		panic("ingest: webhook mapping without header lists") // would fall back to the brokers' defaults
	}
	switch {
	case e.cfg.Key.Header != "":
		if v, ok := lastHeader(hs, strings.ToLower(e.cfg.Key.Header)); ok && len(v) > 0 {
			m.Key = v
		}
	case e.cfg.Key.JSON != "":
		f := jsonFields{payload: body}
		if v, problem, ok := f.get(e.cfg.Key.JSON); ok && problem == "" && v != "" {
			m.Key = []byte(v)
		}
	}
	return mapMessage(m, e.opts)
}

// webhookRejectID is the event id of a request's rejected row.
func webhookRejectID(body []byte) string {
	sum := sha256.Sum256(body)
	return "rejected/sha256:" + hex.EncodeToString(sum[:])
}

// webhookHeaders is what a request stores as headers.
func webhookHeaders(h http.Header, drop []string) []Header {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	hs := make([]Header, 0, len(names))
	for _, k := range names {
		lk := strings.ToLower(k)
		if slices.Contains(drop, lk) {
			continue
		}
		hs = append(hs, Header{Key: lk, Value: []byte(strings.Join(h[k], ", "))})
	}
	slices.SortFunc(hs, func(a, b Header) int { return strings.Compare(a.Key, b.Key) })
	return hs
}

// webhookFetcher is the WebhookSource as the pipeline's source.
type webhookFetcher struct{ s *WebhookSource }

func (f webhookFetcher) fetch(ctx context.Context) (Row, error) {
	select {
	case it := <-f.s.in:
		f.s.mu.Lock()
		f.s.pending = append(f.s.pending, it)
		f.s.mu.Unlock()
		f.s.progressed()
		return it.row, nil
	case <-ctx.Done():
		return Row{}, ctx.Err()
	}
}

// seal returns the acknowledgement of the requests fetched since the last
// seal: it releases their answers.
func (f webhookFetcher) seal() ackFunc {
	f.s.mu.Lock()
	items := f.s.pending
	f.s.pending = nil
	f.s.mu.Unlock()
	return func(context.Context) error {
		for _, it := range items {
			close(it.done)
		}
		return nil
	}
}

func (webhookFetcher) fetchFailed() string { return "receiving webhooks failed" }

// webhookMetrics are the webhook source's own metrics.
type webhookMetrics struct {
	requests       *prometheus.CounterVec
	verifyFailures *prometheus.CounterVec
	commitWait     *prometheus.HistogramVec
	bodyBytes      prometheus.Gauge
	bodyBudget     prometheus.Gauge
	bodyRefusals   *prometheus.CounterVec
}

// newWebhookMetrics creates and registers (with reg; nil: none)
//
//	inboxd_webhook_requests_total{source, code}
//	inboxd_webhook_verify_failures_total{source, reason}
//	inboxd_webhook_commit_wait_seconds{source} (histogram)
//	inboxd_webhook_body_bytes, inboxd_webhook_body_budget_bytes
//	inboxd_webhook_body_refusals_total{reason}
//
// source is a configured name, or _unknown for a 404.
func newWebhookMetrics(reg prometheus.Registerer) (*webhookMetrics, error) {
	const ns, sub = "inboxd", "webhook"
	m := &webhookMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Webhook requests answered, by source and HTTP status code (499: the client left first)."}, []string{"source", "code"}),
		verifyFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "verify_failures_total",
			Help: "Webhook requests refused 401 by their signature check, by source and reason."}, []string{"source", "reason"}),
		commitWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "commit_wait_seconds",
			Help:    "Time a webhook request waited for the commit of the batch holding its row (answered 200).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"source"}),
		bodyBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "body_bytes",
			Help: "Memory held now by the bodies of the webhook requests in hand, in bytes (at most the budget)."}),
		bodyBudget: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "body_budget_bytes",
			Help: "The bodies' budget (INBOXD_WEBHOOK_BODY_BUDGET), in bytes."}),
		bodyRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "body_refusals_total",
			Help: "Webhook bodies refused before their signature was checked, by reason: budget (503: the bodies' budget is spent), too_slow, stalled, too_long (408)."}, []string{"reason"}),
	}
	for _, r := range bodyRefusalReasons {
		m.bodyRefusals.WithLabelValues(r)
	}
	if reg != nil {
		var err error
		m.requests = register(reg, m.requests, &err)
		m.verifyFailures = register(reg, m.verifyFailures, &err)
		m.commitWait = register(reg, m.commitWait, &err)
		m.bodyBytes = register(reg, m.bodyBytes, &err)
		m.bodyBudget = register(reg, m.bodyBudget, &err)
		m.bodyRefusals = register(reg, m.bodyRefusals, &err)
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}
