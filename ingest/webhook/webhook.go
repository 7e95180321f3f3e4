package webhook

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

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/httpserve"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/sensitive"
)

// PathPrefix is the path under which each webhook source listens:
// POST /webhooks/<name>.
const PathPrefix = "/webhooks/"

// webhookRetryAfter is the Retry-After of a 503, in seconds.
const webhookRetryAfter = "5"

// unknownWebhookSource is the source label of requests to no configured
// source (a name cannot start with '_').
const unknownWebhookSource = "_unknown"

// hopByHopHeaders are headers never stored with a row, whatever the
// scheme: they describe the connection, not the event. (Credentials are
// not stored either, unless a source keeps them: sensitive.CredentialHeader
// says which names look like one.)
var hopByHopHeaders = []string{"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade"}

// webhookPruneInterval is how often the webhook source deletes the replay
// records older than their source's window, and webhookPruneBatch how
// many rows one statement deletes at most.
const (
	webhookPruneInterval = time.Minute
	webhookPruneBatch    = 1000
)

// webhookSource receives webhooks over HTTP into the inbox table: each
// request is verified, mapped to its row and handed to the persist-then-ack
// pipeline shared with the brokers, and answered 200 only once the batch
// holding its row has committed (a duplicate too). Create it with
// openWebhook (New opens it) and start it with Run; Ready,
// Addr and LastProgress may be called from any goroutine.
type webhookSource struct {
	*ingestcore.Pipeline

	cfg       Config
	tls       *tls.Config
	endpoints map[string]*webhookEndpoint
	wm        *webhookMetrics

	replays  replayStore       // nil when no source has a replay window
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
	webhookMapping
	verifier webhookVerifier
	needJSON bool

	requests   *prometheus.CounterVec // by code
	verifyFail *prometheus.CounterVec // by reason
	replays    prometheus.Counter
	commitWait prometheus.Observer
}

// webhookMapping is how a source's verified requests become rows: the
// live requests' and, for `inboxd requeue --status rejected`, the stored
// ones' (remapRule), by the same rules.
type webhookMapping struct {
	cfg  SourceConfig
	opts ingest.MapOptions
	read []string // lower-case names of the headers the mapping reads: stored, and refused when repeated
	sig  []string // lower-case names of the signature headers: never stored
}

// replayStore is where a source's replay window is kept: the
// webhook_replays table.
type replayStore interface {
	// firstSeen records the body's acceptance under eventID and reports
	// whether it may be accepted (false: a replay).
	firstSeen(ctx context.Context, source string, sum []byte, eventID string, window time.Duration) (bool, error)
	// prune deletes a batch of records older than window; it returns how
	// many.
	prune(ctx context.Context, source string, window time.Duration) (int64, error)
}

// pgReplays is the replayStore on a pool.
type pgReplays struct{ pool *pgxpool.Pool }

func (r pgReplays) firstSeen(ctx context.Context, source string, sum []byte, eventID string, window time.Duration) (bool, error) {
	return driver.WebhookFirstSeen(ctx, r.pool, source, sum, eventID, window)
}

func (r pgReplays) prune(ctx context.Context, source string, window time.Duration) (int64, error) {
	return driver.PruneWebhookReplays(ctx, r.pool, source, window, webhookPruneBatch)
}

// webhookItem is one request's row on its way through the pipeline; done
// is closed once its batch has committed.
type webhookItem struct {
	row  ingestcore.Row
	done chan struct{}
}

// openWebhook validates cfg (after applying defaults) and returns a
// webhookSource writing to pool. It does not listen: Run does. Metrics are
// registered with reg (nil registers none): the ingest metrics under
// source_kind=webhook, and inboxd_webhook_*.
func openWebhook(cfg Config, pool *pgxpool.Pool, logger zerolog.Logger, reg prometheus.Registerer) (*webhookSource, error) {
	w, err := ingestcore.WriterOn(pool, cfg.handOff)
	if err != nil {
		return nil, err
	}
	return newWebhook(cfg, w, logger, reg)
}

func newWebhook(cfg Config, w ingestcore.InboxWriter, logger zerolog.Logger, reg prometheus.Registerer) (*webhookSource, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
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
	s := &webhookSource{cfg: cfg, tls: tc, wm: wm, endpoints: map[string]*webhookEndpoint{},
		in: make(chan *webhookItem), sem: make(chan struct{}, cfg.MaxRequests), stopping: make(chan struct{}),
		budget: newBodyBudget(cfg.BodyBudget, wm.bodyBytes, wm.bodyBudget)}
	base := ingestcore.MapDefaults(cfg.Pipeline.Mapping)
	for _, sc := range cfg.Sources {
		s.endpoints[sc.Name] = newWebhookEndpoint(sc, base, wm)
		if sc.ReplayWindow > 0 && s.replays == nil {
			p, ok := w.(interface{ DBPool() *pgxpool.Pool })
			if !ok {
				return nil, fmt.Errorf("ingest: webhook source %s: replay_window needs the database, and this writer has none", sc.Name)
			}
			s.replays = pgReplays{p.DBPool()}
		}
	}
	wm.requests.WithLabelValues(unknownWebhookSource, "404")
	s.Pipeline, err = ingestcore.NewPipeline(ingest.SourceWebhook, cfg.Pipeline, w, logger, reg, s.Reachable)
	if err != nil {
		return nil, fmt.Errorf("ingest: register metrics: %w", err)
	}
	return s, nil
}

func newWebhookEndpoint(sc SourceConfig, base ingest.MapOptions, wm *webhookMetrics) *webhookEndpoint {
	e := &webhookEndpoint{webhookMapping: newWebhookMapping(sc, base), verifier: newWebhookVerifier(sc)}
	e.needJSON = sc.EventID.JSON != "" || sc.EventType.JSON != "" || sc.Key.JSON != ""
	e.replays = wm.replays.WithLabelValues(sc.Name)
	e.requests = wm.requests.MustCurryWith(prometheus.Labels{"source": sc.Name})
	for _, code := range webhookCodes {
		e.requests.WithLabelValues(code)
	}
	e.verifyFail = wm.verifyFailures.MustCurryWith(prometheus.Labels{"source": sc.Name})
	if sc.Verify != None {
		for _, r := range verifyReasons {
			e.verifyFail.WithLabelValues(r)
		}
	}
	e.commitWait = wm.commitWait.WithLabelValues(sc.Name)
	return e
}

// newWebhookMapping returns sc's mapping (sc valid, its defaults applied),
// with base's header bound.
func newWebhookMapping(sc SourceConfig, base ingest.MapOptions) webhookMapping {
	m := webhookMapping{cfg: sc}
	m.opts = ingest.MapOptions{EventIDHeaders: []string{}, EventTypeHeaders: []string{},
		EventIDJSONField: sc.EventID.JSON, EventTypeJSONField: sc.EventType.JSON,
		MaxPayload: sc.MaxBody, MaxHeaders: base.MaxHeaders}
	switch id := strings.ToLower(sc.EventID.Header); {
	case sc.Verify == Standard && standardIDHeader(id):
		// The signed id, of whichever family the request uses: a request
		// carries one family only, each header once (verifyStandard).
		m.opts.EventIDHeaders = []string{standardFamilies[0].id, standardFamilies[1].id}
	case id != "":
		m.opts.EventIDHeaders = []string{id}
	}
	if sc.EventType.Header != "" {
		m.opts.EventTypeHeaders = []string{strings.ToLower(sc.EventType.Header)}
	}
	m.read = slices.Concat(m.opts.EventIDHeaders, m.opts.EventTypeHeaders)
	if sc.Key.Header != "" {
		m.read = append(m.read, strings.ToLower(sc.Key.Header))
	}
	for _, h := range signatureHeaders(sc) {
		m.sig = append(m.sig, strings.ToLower(h))
	}
	return m
}

// stored reports whether a request's header named lk (lower case) is
// stored with its row: not a hop-by-hop header, nor a signature, nor a
// credential (sensitive.CredentialHeader) unless the mapping reads it or
// the source keeps it (keep_headers).
func (m webhookMapping) stored(lk string) bool {
	switch {
	case slices.Contains(hopByHopHeaders, lk), slices.Contains(m.sig, lk):
		return false
	case slices.Contains(m.read, lk):
		return true
	case sensitive.CredentialHeader(lk):
		return slices.ContainsFunc(m.cfg.KeepHeaders, func(k string) bool { return strings.EqualFold(k, lk) })
	}
	return true
}

// repeatedHeader returns the first header the mapping reads that h
// carries more than once, or "".
func (m webhookMapping) repeatedHeader(h http.Header) string {
	for _, name := range m.read {
		if len(h.Values(name)) > 1 {
			return name
		}
	}
	return ""
}

// Ready reports whether the source runs, listens, and its last batch write
// did not fail.
func (s *webhookSource) Ready() bool { return s.IsReady() }

// Reachable reports whether the listener is up.
func (s *webhookSource) Reachable() bool { return s.addr.Load() != nil }

// Addr returns the listener's address once Run listens, else "".
func (s *webhookSource) Addr() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// LastProgress returns when a request's row was last fetched or a batch
// last written; zero before the first.
func (s *webhookSource) LastProgress() time.Time { return s.Progress() }

// Run listens on cfg.Addr and serves until ctx is cancelled; it returns
// nil then, and an error when it cannot listen (a start-up error) or the
// server fails. At shutdown the listener closes first, the requests in
// hand get their answers (their rows written within CloseTimeout), then
// the pipeline stops: a request whose row could not be written is
// answered 503, and the sender retries.
func (s *webhookSource) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("INBOXD_WEBHOOK_ADDR: cannot listen on %s: %w", s.cfg.Addr, err)
	}
	srv := httpserve.New(s, httpserve.Limits{
		ReadHeader:     s.cfg.ReadHeaderTimeout,
		Read:           s.cfg.ReadTimeout,
		Write:          s.cfg.ReadTimeout + s.cfg.WriteTimeout + 5*time.Second,
		Idle:           s.cfg.IdleTimeout,
		MaxHeaderBytes: ingestcore.MapDefaults(s.cfg.Pipeline.Mapping).MaxHeaders + 8<<10,
		MaxConns:       webhookMaxConns(s.cfg.MaxRequests),
	}, s.Log)

	pctx, stopPipeline := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPipeline()
	pipeDone := make(chan error, 1)
	go func() {
		pipeDone <- s.RunSession(pctx, webhookFetcher{s}, func() {}, func() {
			a := ln.Addr().String()
			s.addr.Store(&a)
			s.UpdateReady()
			names := make([]string, 0, len(s.endpoints))
			for n := range s.endpoints {
				names = append(names, n)
			}
			slices.Sort(names)
			s.Log.Info().Str("addr", a).Bool("tls", s.tls != nil).Strs("sources", names).
				Int("max_requests", s.cfg.MaxRequests).Dur("write_timeout", s.cfg.WriteTimeout).
				Int64("body_budget", s.cfg.BodyBudget).Int("min_body_rate", s.cfg.MinBodyRate).
				Int("max_conns", webhookMaxConns(s.cfg.MaxRequests)).
				Int("batch_size", s.cfg.Pipeline.BatchSize).Msg("ingest starting: serving webhooks")
		}, func() {})
	}()
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.ServeTLSConfig(ln, s.tls) }()
	pruneCtx, stopPruning := context.WithCancel(ctx)
	pruned := make(chan struct{})
	go func() {
		defer close(pruned)
		s.pruneReplays(pruneCtx)
	}()
	defer func() {
		stopPruning()
		<-pruned
	}()

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

// pruneReplays deletes, every webhookPruneInterval until ctx ends, the
// replay records older than their source's window, a batch at a time; it
// returns at once when no source has a window. Every replica prunes (SKIP
// LOCKED keeps them off each other's rows); a failure is logged and tried
// again at the next round.
func (s *webhookSource) pruneReplays(ctx context.Context) {
	if s.replays == nil {
		return
	}
	t := time.NewTicker(webhookPruneInterval)
	defer t.Stop()
	for {
		for _, e := range s.endpoints {
			if e.cfg.ReplayWindow <= 0 {
				continue
			}
			for ctx.Err() == nil {
				n, err := s.replays.prune(ctx, e.cfg.Name, e.cfg.ReplayWindow)
				if err != nil {
					if ctx.Err() == nil {
						s.Log.Warn().Err(err).Str("source", e.cfg.Name).Msg("pruning the webhook replay records failed; trying again later")
					}
					break
				}
				if n < webhookPruneBatch {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ServeHTTP serves POST /webhooks/<name>.
func (s *webhookSource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
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
func (s *webhookSource) serve(w http.ResponseWriter, r *http.Request, e *webhookEndpoint) int {
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
	if code := s.admit(w, r, e, body); code != 0 {
		return code
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		return unavailable(w, "too many requests at once")
	}
	it := &webhookItem{row: e.mapRequest(r.Header, body), done: make(chan struct{})}

	start := time.Now()
	timer := time.NewTimer(s.cfg.WriteTimeout)
	defer timer.Stop()
	if code := s.replayed(w, r, e, it.row, body, start.Add(s.cfg.WriteTimeout)); code != 0 {
		return code
	}
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
	if it.row.Status == ingestcore.StatusRejected {
		return answer(w, http.StatusOK, `{"status":"rejected","reason":"`+string(it.row.Reason)+`"}`)
	}
	return answer(w, http.StatusOK, `{"status":"stored"}`)
}

// admit checks a request to e whose body has been read: it answers it
// and returns the answer's code when the request is refused (its
// signature fails, a header the signature or the mapping reads is
// repeated, a JSON body is needed and missing, the inbox cannot be
// written to), else it returns 0.
func (s *webhookSource) admit(w http.ResponseWriter, r *http.Request, e *webhookEndpoint, body []byte) int {
	if reason := e.verifier.verify(r.Header, body, s.cfg.Now()); reason != "" {
		e.verifyFail.WithLabelValues(reason).Inc()
		s.Log.Debug().Str("source", e.cfg.Name).Str("reason", reason).Str("remote", r.RemoteAddr).
			Msg("webhook refused: verification failed; nothing stored")
		return answer(w, http.StatusUnauthorized, `{"error":"verification failed"}`)
	}
	if name := e.repeatedHeader(r.Header); name != "" {
		s.Log.Debug().Str("source", e.cfg.Name).Str("header", name).Str("remote", r.RemoteAddr).
			Msg("webhook refused: a header the mapping reads is repeated; nothing stored")
		b, _ := json.Marshal(map[string]string{"error": "header " + name + " is repeated: it must come once"})
		return answer(w, http.StatusBadRequest, string(b))
	}
	if e.needJSON && !jsonObject(body) {
		return answer(w, http.StatusUnsupportedMediaType, `{"error":"the body must be a JSON object"}`)
	}
	if !s.WritesOK.Load() {
		return unavailable(w, "the inbox cannot be written to")
	}
	return 0
}

// replayed applies e's replay window to row, the request's: it answers the
// request and returns the answer's code when its body was accepted under
// another event id within the window (200, nothing stored) or the record
// cannot be written by deadline (503), else it returns 0. A source without
// a window, and a rejected row (its id is the body's hash already), cost
// nothing.
func (s *webhookSource) replayed(w http.ResponseWriter, r *http.Request, e *webhookEndpoint, row ingestcore.Row, body []byte,
	deadline time.Time) int {
	if e.cfg.ReplayWindow <= 0 || row.Status != ingestcore.StatusReceived {
		return 0
	}
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	sum := sha256.Sum256(body)
	ok, err := s.replays.firstSeen(ctx, e.cfg.Name, sum[:], row.EventID, e.cfg.ReplayWindow)
	switch {
	case err != nil:
		s.Log.Warn().Err(err).Str("source", e.cfg.Name).Msg("webhook answered 503: its replay record could not be written")
		return unavailable(w, "the inbox cannot be written to")
	case !ok:
		e.replays.Inc()
		s.Log.Debug().Str("source", e.cfg.Name).Str("event_id", row.EventID).Str("remote", r.RemoteAddr).
			Msg("webhook replay: this body was accepted under another event id within replay_window; nothing stored")
		return answer(w, http.StatusOK, `{"status":"replay","reason":"this body was accepted under another event id within replay_window"}`)
	}
	return 0
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

// mapRequest maps a verified request to its row (mapStored) with the
// headers it stores: lower-case names, sorted, a repeated header's values
// joined by ", " (those the mapping reads were refused when repeated),
// less the hop-by-hop, signature and credential headers (stored).
func (m webhookMapping) mapRequest(h http.Header, body []byte) ingestcore.Row {
	return m.mapStored(webhookHeaders(h, m.stored), body)
}

// mapStored maps a request's stored headers hs and its body by the shared
// mapping: id, type and key where the source says (the id from the body's
// hash, "sha256:<hex>", with event_id {body: sha256}). A request whose id
// or type is missing or unusable becomes a rejected row whose event id,
// "rejected/sha256:<hex of the body>", is the same when it is sent again.
func (m webhookMapping) mapStored(hs []ingestcore.Header, body []byte) ingestcore.Row {
	sum := sha256.Sum256(body)
	hexSum := hex.EncodeToString(sum[:])
	msg := &ingestcore.Message{Source: m.cfg.Name, Value: body, Headers: hs, RejectID: webhookRejectPrefix + hexSum}
	if m.cfg.EventType.Value != "" {
		msg.EventType, msg.EventTypeProperty = m.cfg.EventType.Value, "event_type value"
	}
	if m.cfg.EventID.Body == BodySHA256 {
		msg.EventID, msg.EventIDProperty = "sha256:"+hexSum, "event_id body sha256"
	}
	if m.opts.EventIDHeaders == nil || m.opts.EventTypeHeaders == nil {
		panic("ingest: webhook mapping without header lists") // would fall back to the brokers' defaults
	}
	switch {
	case m.cfg.Key.Header != "":
		if v, ok := ingestcore.LastHeader(hs, strings.ToLower(m.cfg.Key.Header)); ok && len(v) > 0 {
			msg.Key = v
		}
	case m.cfg.Key.JSON != "":
		if v, problem, ok := ingestcore.JSONField(body, m.cfg.Key.JSON); ok && problem == "" && v != "" {
			msg.Key = []byte(v)
		}
	}
	return ingestcore.MapRow(msg, m.opts)
}

// webhookRejectPrefix starts the event id of every webhook source's
// rejected row (mapStored); no broker source's rejected id has this
// form.
const webhookRejectPrefix = "rejected/sha256:"

// isWebhookRejectID reports whether eventID is a webhook source's rejected
// row's: webhookRejectPrefix and a SHA-256 in hex.
func isWebhookRejectID(eventID string) bool {
	sum, ok := strings.CutPrefix(eventID, webhookRejectPrefix)
	return ok && ingestcore.IsSHA256Hex(sum)
}

// remapRule is the webhook sources' remap rule: the rejected row of the
// webhook source s.Source (its event id, its body, its stored headers) is
// mapped again by that source's rules, as found in sources (nil: no
// sources file), over opts. A source sources does not name leaves the row
// rejected, saying why: mapped by another source's rules, it would take
// its id and type from whatever headers it carries, which nothing signed.
type remapRule struct {
	sources []SourceConfig
	opts    ingest.MapOptions
}

// Owns reports whether s's event id is a webhook source's rejected row's
// (isWebhookRejectID).
func (remapRule) Owns(s ingestcore.Stored) bool { return isWebhookRejectID(s.EventID) }

// Remap implements ingestcore.RemapRule.
func (r remapRule) Remap(s ingestcore.Stored) ingestcore.Row {
	i := slices.IndexFunc(r.sources, func(c SourceConfig) bool { return c.Name == s.Source })
	if i < 0 {
		why := "INBOXD_WEBHOOK_SOURCES is not set"
		if r.sources != nil {
			why = "the webhook sources file (INBOXD_WEBHOOK_SOURCES) names no such source"
		}
		return ingestcore.Row{Source: s.Source, EventID: s.EventID, Key: s.Key, Payload: s.Payload, Status: ingestcore.StatusRejected,
			LastError: fmt.Sprintf("a row of the webhook source %q is mapped again only by that source's rules, and %s", s.Source, why)}
	}
	return newWebhookMapping(r.sources[i].withDefaults(), ingestcore.MapDefaults(r.opts)).mapStored(s.Headers, s.Payload)
}

// webhookHeaders is what a request stores as headers: those keep says
// (by lower-case name).
func webhookHeaders(h http.Header, keep func(lk string) bool) []ingestcore.Header {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	hs := make([]ingestcore.Header, 0, len(names))
	for _, k := range names {
		lk := strings.ToLower(k)
		if !keep(lk) {
			continue
		}
		hs = append(hs, ingestcore.Header{Key: lk, Value: []byte(strings.Join(h[k], ", "))})
	}
	slices.SortFunc(hs, func(a, b ingestcore.Header) int { return strings.Compare(a.Key, b.Key) })
	return hs
}

// webhookFetcher is the webhookSource as the pipeline's source.
type webhookFetcher struct{ s *webhookSource }

func (f webhookFetcher) Fetch(ctx context.Context) (ingestcore.Row, error) {
	select {
	case it := <-f.s.in:
		f.s.mu.Lock()
		f.s.pending = append(f.s.pending, it)
		f.s.mu.Unlock()
		f.s.Progressed()
		return it.row, nil
	case <-ctx.Done():
		return ingestcore.Row{}, ctx.Err()
	}
}

// seal returns the acknowledgement of the requests fetched since the last
// seal: it releases their answers.
func (f webhookFetcher) Seal() ingestcore.AckFunc {
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

func (webhookFetcher) FetchFailed() string { return "receiving webhooks failed" }

// webhookMetrics are the webhook source's own metrics.
type webhookMetrics struct {
	requests       *prometheus.CounterVec
	verifyFailures *prometheus.CounterVec
	replays        *prometheus.CounterVec
	commitWait     *prometheus.HistogramVec
	bodyBytes      prometheus.Gauge
	bodyBudget     prometheus.Gauge
	bodyRefusals   *prometheus.CounterVec
}

// newWebhookMetrics creates and registers (with reg; nil: none)
//
//	inboxd_webhook_requests_total{source, code}
//	inboxd_webhook_verify_failures_total{source, reason}
//	inboxd_webhook_replays_total{source}
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
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "replays_total",
			Help: "Webhook requests whose body was accepted under another event id within their source's replay_window: answered 200, nothing stored."}, []string{"source"}),
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
		m.requests = ingestcore.Register(reg, m.requests, &err)
		m.verifyFailures = ingestcore.Register(reg, m.verifyFailures, &err)
		m.replays = ingestcore.Register(reg, m.replays, &err)
		m.commitWait = ingestcore.Register(reg, m.commitWait, &err)
		m.bodyBytes = ingestcore.Register(reg, m.bodyBytes, &err)
		m.bodyBudget = ingestcore.Register(reg, m.bodyBudget, &err)
		m.bodyRefusals = ingestcore.Register(reg, m.bodyRefusals, &err)
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}
