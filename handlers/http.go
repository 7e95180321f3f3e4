package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// The request headers the http handler sets on every POST besides
// Content-Type and User-Agent.
const (
	// HeaderIdempotencyKey carries a key unique per inbox row, for the
	// receiver to deduplicate redeliveries: "<source>/<event id>" by default
	// (see HTTPConfig.IdempotencyKey and IdempotencyKeyFor).
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderEventID carries Event.EventID, the producer's id, unique only
	// within Event.Source, escaped with EscapeHeaderValue.
	HeaderEventID = "Inbox-Event-Id"
	// HeaderEventType carries Event.EventType, escaped with
	// EscapeHeaderValue.
	HeaderEventType = "Inbox-Event-Type"
	// HeaderSource carries Event.Source (the Kafka topic for ingested rows),
	// escaped with EscapeHeaderValue.
	HeaderSource = "Inbox-Source"
	// HeaderAttempt carries Event.Attempt in decimal, starting at 1.
	HeaderAttempt = "Inbox-Attempt"
)

// The values of HTTPConfig.IdempotencyKey, and of a route's
// idempotency_key in the routes file.
const (
	// IdempotencyKeySourceEventID makes the Idempotency-Key
	// "<source>/<event id>", unique per inbox row since rows are unique on
	// (source, event_id). It is the default.
	IdempotencyKeySourceEventID = "source_event_id"
	// IdempotencyKeyEventID makes the Idempotency-Key the bare event id, as
	// Inbox-Event-Id (escaped with EscapeHeaderValue). Use it only when event
	// ids are unique across every source the route receives.
	IdempotencyKeyEventID = "event_id"
)

const (
	// maxErrorBody is how much of a failed response's body is read for the
	// excerpt in the error.
	maxErrorBody = 4 << 10
	// maxDrain is how much of a response body is read (and discarded) so
	// the connection can be reused; a longer body closes the connection.
	maxDrain = 64 << 10
	// excerptLen caps the body excerpt in an error, in bytes.
	excerptLen = 200
)

// HTTPConfig configures the built-in http handler that NewHTTP makes.
type HTTPConfig struct {
	// URL is the absolute http or https URL that every event is POSTed to.
	URL string
	// Timeout bounds each request: connecting, sending the payload and
	// receiving the response. It must be greater than zero.
	Timeout time.Duration
	// Client sends the requests. When it is nil, a client shared by all http
	// handlers is used, whose transport keeps up to 128 idle connections per
	// host and takes its proxy from HTTP_PROXY, HTTPS_PROXY and NO_PROXY
	// (http.ProxyFromEnvironment). Redirects are never followed, whatever
	// the client's CheckRedirect says.
	Client *http.Client
	// MaxRetryAfter caps the delay that a response's Retry-After header can
	// ask for. Zero means no cap (the worker still caps every delay at
	// INBOXD_BACKOFF_MAX).
	MaxRetryAfter time.Duration
	// IdempotencyKey chooses the Idempotency-Key header:
	// IdempotencyKeySourceEventID ("<source>/<event id>", also when empty)
	// or IdempotencyKeyEventID (the bare event id).
	IdempotencyKey string
}

// IdempotencyKeyFor returns the Idempotency-Key that the http handler sends
// for ev by default: "<source>/<event id>", each part escaped with
// EscapeHeaderValue and a "/" in the source also percent-encoded (%2F). The
// key is unique per inbox row whatever its source and event id hold (the
// mapping is injective: the key's first "/" ends the source, and unescaping
// each part gives the row back), and it reaches the receiver byte for byte.
// Kafka topic names and the usual event ids go out unchanged.
func IdempotencyKeyFor(ev *Event) string {
	return escapeHeader(ev.Source, '/') + "/" + EscapeHeaderValue(ev.EventID)
}

// EscapeHeaderValue returns s as the http handler sends an event id, event
// type or source in a header: every byte outside visible ASCII (0x21-0x7E:
// so spaces, tabs, control characters and the bytes of non-ASCII UTF-8), and
// "%" itself, becomes "%XX" with upper-case hex digits (RFC 3986's
// percent-encoding); every other byte is kept. Values without such bytes go
// out unchanged, different values never give the same result, and the result
// survives HTTP header transport (which trims leading and trailing blanks
// and cannot carry control characters) exactly.
func EscapeHeaderValue(s string) string { return escapeHeader(s, '%') }

// escapeHeader is EscapeHeaderValue with reserved percent-encoded as well.
func escapeHeader(s string, reserved byte) string {
	keep := func(b byte) bool { return b > ' ' && b < 0x7f && b != '%' && b != reserved }
	i := 0
	for i < len(s) && keep(s[i]) {
		i++
	}
	if i == len(s) {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, i, len(s)+16)
	copy(b, s[:i])
	for ; i < len(s); i++ {
		if c := s[i]; keep(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		}
	}
	return string(b)
}

// NewHTTP returns the built-in http handler: it POSTs each event's payload,
// byte for byte, to cfg.URL and turns the response into the row's outcome.
//
// The request carries the headers Idempotency-Key (IdempotencyKeyFor(ev),
// "<source>/<event id>", unique per inbox row; the bare event id with
// cfg.IdempotencyKey set to IdempotencyKeyEventID), Inbox-Event-Id
// (Event.EventID), Inbox-Event-Type, Inbox-Source and Inbox-Attempt (the
// identifiers escaped with EscapeHeaderValue), and a
// Content-Type taken from the event's content-type header (matched without
// regard to case), or else application/json when the payload is valid JSON,
// or else application/octet-stream. When OpenTelemetry's global propagator
// is set (the daemon sets it when tracing is on), the request
// also carries the trace context of the handler's context: traceparent and
// tracestate (W3C Trace Context, and baggage when the context has some), so
// the receiver's spans join the trace.
//
// A 2xx response marks the row processed. 408, 425, 429 and 5xx responses,
// timeouts and connection errors are retried; a Retry-After header on the
// response (seconds or an HTTP date, zero or past values ignored) becomes
// the delay asked for with RetryAfter, capped at cfg.MaxRetryAfter. Any
// other response, including a redirect (which is not followed), is
// permanent: the error reads like `http 422 Unprocessable Entity: <excerpt>`
// with at most about 200 bytes of the body, whitespace collapsed. When the
// handler's context ends (shutdown, lost lease) the error wraps ctx.Err()
// and is retryable.
func NewHTTP(cfg HTTPConfig) (Handler, error) {
	u, err := checkHTTPURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	if cfg.Timeout <= 0 {
		return nil, errors.New("timeout: must be greater than 0")
	}
	if cfg.MaxRetryAfter < 0 {
		return nil, errors.New("max retry after: must not be negative")
	}
	switch cfg.IdempotencyKey {
	case "", IdempotencyKeySourceEventID, IdempotencyKeyEventID:
	default:
		return nil, fmt.Errorf("idempotency_key: must be %s or %s, not %q", IdempotencyKeySourceEventID, IdempotencyKeyEventID, cfg.IdempotencyKey)
	}
	client := sharedHTTPClient()
	if cfg.Client != nil {
		c := *cfg.Client
		c.CheckRedirect = noRedirects
		client = &c
	}
	return &httpHandler{
		url:           u.String(),
		target:        (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String(),
		timeout:       cfg.Timeout,
		maxRetryAfter: cfg.MaxRetryAfter,
		bareEventID:   cfg.IdempotencyKey == IdempotencyKeyEventID,
		client:        client,
	}, nil
}

// checkHTTPURL parses s and accepts only absolute http and https URLs with
// a host.
func checkHTTPURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return nil, errors.New("must be an absolute http or https URL")
	}
	return u, nil
}

// sharedHTTPClient is the client of every http handler configured without
// one, built on first use.
var sharedHTTPClient = sync.OnceValue(func() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment,
			DialContext: (&net.Dialer{
				Timeout:   30 * time.Second,
				KeepAlive: 30 * time.Second,
			}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          512,
			MaxIdleConnsPerHost:   128,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: noRedirects,
	}
})

// noRedirects makes the client return a redirect response as it is.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// httpHandler is the Handler that NewHTTP returns.
type httpHandler struct {
	url           string
	target        string // url without user info, query or fragment, for errors
	timeout       time.Duration
	maxRetryAfter time.Duration
	bareEventID   bool // Idempotency-Key is the event id alone
	client        *http.Client
}

// Handle POSTs ev to h.url; see NewHTTP for the outcomes.
func (h *httpHandler) Handle(ctx context.Context, ev *Event) error {
	reqCtx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, h.url, bytes.NewReader(ev.Payload))
	if err != nil {
		return Permanent(fmt.Errorf("http: build request: %w", err))
	}
	req.Header.Set("Content-Type", contentType(ev))
	req.Header.Set("User-Agent", "inboxd")
	// Identifiers are escaped (EscapeHeaderValue): sent raw, blanks at
	// either end would be trimmed on the wire and two rows share a key.
	eventID := EscapeHeaderValue(ev.EventID)
	if h.bareEventID {
		req.Header.Set(HeaderIdempotencyKey, eventID)
	} else {
		req.Header.Set(HeaderIdempotencyKey, IdempotencyKeyFor(ev))
	}
	req.Header.Set(HeaderEventID, eventID)
	req.Header.Set(HeaderEventType, EscapeHeaderValue(ev.EventType))
	req.Header.Set(HeaderSource, EscapeHeaderValue(ev.Source))
	req.Header.Set(HeaderAttempt, strconv.Itoa(ev.Attempt))
	// The trace context of ctx (traceparent, tracestate), as the global
	// propagator writes it: nothing until one is set (the daemon sets one when tracing is on).
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))

	resp, err := h.client.Do(req)
	if err != nil {
		return h.requestError(ctx, reqCtx, err)
	}
	defer drainClose(resp.Body)

	return h.responseError(resp)
}

// responseError is the error a response's status says (nil for a 2xx): a
// redirect or a 4xx other than 408, 425 and 429 is permanent, the rest
// retryable (after its Retry-After, capped).
func (h *httpHandler) responseError(resp *http.Response) error {
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return nil
	case code >= 300 && code < 400:
		if loc := resp.Header.Get("Location"); loc != "" {
			return Permanent(fmt.Errorf("http %s: redirect to %s not followed", statusText(code), excerpt([]byte(loc))))
		}
		return Permanent(fmt.Errorf("http %s: redirects are not followed", statusText(code)))
	}

	// The read error, if any, is dropped: the status decides, and whatever
	// part of the body arrived still makes the excerpt.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	msg := "http " + statusText(code)
	if ex := excerpt(body); ex != "" {
		msg += ": " + ex
	}
	err := errors.New(msg)
	if !retryableStatus(code) {
		return Permanent(err)
	}
	if d, ok := parseRetryAfter(resp.Header, time.Now()); ok {
		if h.maxRetryAfter > 0 && d > h.maxRetryAfter {
			d = h.maxRetryAfter
		}
		return RetryAfter(d, err)
	}
	return err
}

// requestError describes a request that got no response. All such errors
// are retryable; a dial failure (IsDialError: refused, DNS, no file
// descriptor left) says that the request was not sent (NotSent: the
// attempt is not counted).
func (h *httpHandler) requestError(ctx, reqCtx context.Context, err error) error {
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
			return fmt.Errorf("http POST %s: aborted: %w (%w)", h.target, ctx.Err(), cause)
		}
		return fmt.Errorf("http POST %s: aborted: %w", h.target, ctx.Err())
	}
	if errors.Is(reqCtx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("http POST %s: no response within %s: %w", h.target, h.timeout, context.DeadlineExceeded)
	}
	// *url.Error repeats the full URL (query included); name the target
	// instead.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if IsDialError(err) {
		return NotSent(fmt.Errorf("http POST %s: cannot connect, request not sent: %w", h.target, err))
	}
	return fmt.Errorf("http POST %s: %w", h.target, err)
}

// retryableStatus reports whether a response with status code may succeed
// when the request is repeated later.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return code >= 500 && code < 600
}

// statusText is "404 Not Found", or just "499" for codes without a name.
func statusText(code int) string {
	return strings.TrimSpace(strconv.Itoa(code) + " " + http.StatusText(code))
}

// contentType picks the request's Content-Type for ev.
func contentType(ev *Event) string {
	if v := eventHeader(ev.Headers, "content-type"); v != "" && validHeaderValue(v) {
		return v
	}
	if json.Valid(ev.Payload) {
		return "application/json"
	}
	return "application/octet-stream"
}

// eventHeader returns the value of the header name, matched without regard
// to case. An exact match wins; among other matches the smallest key does,
// so the choice does not depend on map order.
func eventHeader(headers map[string]string, name string) string {
	if v, ok := headers[name]; ok {
		return strings.TrimSpace(v)
	}
	best, found := "", false
	for k := range headers {
		if strings.EqualFold(k, name) && (!found || k < best) {
			best, found = k, true
		}
	}
	if !found {
		return ""
	}
	return strings.TrimSpace(headers[best])
}

// validHeaderValue reports whether v can be sent as an HTTP header value:
// no control characters other than horizontal tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// parseRetryAfter reads the Retry-After header as delay-seconds or as an
// HTTP date. A date is measured from the response's Date header when it has
// one (so the two clocks need not agree), else from now. It reports false
// for a missing, malformed, zero or past value.
func parseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, false
		}
		if secs == 0 {
			return 0, false
		}
		if err != nil || secs > uint64(math.MaxInt64/int64(time.Second)) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		now = date
	}
	d := at.Sub(now)
	if d <= 0 {
		return 0, false
	}
	return d, true
}

// excerpt makes a one-line, valid UTF-8 excerpt of b for an error message:
// control characters become spaces, runs of white space collapse to one
// space, and anything past excerptLen bytes is cut off and marked with "…".
func excerpt(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= excerptLen {
		return s
	}
	cut := excerptLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.TrimRight(s[:cut], " ") + "…"
}

// drainClose reads what is left of a response body, up to maxDrain, and
// closes it, so that the connection goes back to the pool.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	_ = body.Close()
}
