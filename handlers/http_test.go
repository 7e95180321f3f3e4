package handlers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/handlers"
)

// received is what a test server saw of one request.
type received struct {
	method string
	header http.Header
	body   []byte
}

// httpBundle is a test server and an http handler pointed at it.
type httpBundle struct {
	srv      *httptest.Server
	handler  handlers.Handler
	requests chan received
}

// setupHTTP starts a server answering with serve, records every request it
// gets, and makes an http handler for it with cfg (URL and, when zero,
// Timeout filled in).
func setupHTTP(t *testing.T, cfg handlers.HTTPConfig, serve http.HandlerFunc) *httpBundle {
	t.Helper()
	b := &httpBundle{requests: make(chan received, 16)}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("server: read body: %v", err)
		}
		select {
		case b.requests <- received{method: r.Method, header: r.Header.Clone(), body: body}:
		default:
		}
		serve(w, r)
	}))
	t.Cleanup(b.srv.Close)
	if cfg.URL == "" {
		cfg.URL = b.srv.URL + "/hooks/inbox"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	h, err := handlers.NewHTTP(cfg)
	if err != nil {
		t.Fatalf("NewHTTP: %v", err)
	}
	b.handler = h
	return b
}

func testEvent() *handlers.Event {
	return &handlers.Event{
		ID:        7,
		Source:    "orders",
		EventID:   "evt-42",
		EventType: "order.created",
		Payload:   []byte(`{"sku":"A-1"}`),
		Attempt:   3,
	}
}

func status(code int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code      int
		body      string
		permanent bool
		want      string // substring of the error; "" means nil error
	}{
		{code: 200, body: "ok"},
		{code: 201},
		{code: 204},
		{code: 408, want: "http 408 Request Timeout"},
		{code: 425, want: "http 425 Too Early"},
		{code: 429, body: "slow down", want: "http 429 Too Many Requests: slow down"},
		{code: 500, body: "boom\n", want: "http 500 Internal Server Error: boom"},
		{code: 502, want: "http 502 Bad Gateway"},
		{code: 503, want: "http 503 Service Unavailable"},
		{code: 599, want: "http 599"},
		{code: 400, body: "missing field\n\tsku", permanent: true, want: "http 400 Bad Request: missing field sku"},
		{code: 404, body: "no such hook", permanent: true, want: "http 404 Not Found: no such hook"},
		{code: 409, permanent: true, want: "http 409 Conflict"},
		{code: 422, body: `{"error":"bad sku"}`, permanent: true, want: `http 422 Unprocessable Entity: {"error":"bad sku"}`},
		{code: 499, body: "x", permanent: true, want: "http 499: x"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			t.Parallel()
			b := setupHTTP(t, handlers.HTTPConfig{}, status(tt.code, tt.body))
			err := b.handler.Handle(context.Background(), testEvent())
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Handle: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Handle: nil, want error containing %q", tt.want)
			}
			if got := err.Error(); !strings.Contains(got, tt.want) {
				t.Errorf("error %q does not contain %q", got, tt.want)
			}
			if got := handlers.IsPermanent(err); got != tt.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, got, tt.permanent)
			}
			if _, ok := handlers.RetryDelay(err); ok {
				t.Errorf("RetryDelay(%v) reports a delay without Retry-After", err)
			}
		})
	}
}

func TestHTTPRetryAfter(t *testing.T) {
	t.Parallel()
	date := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		code     int
		header   []string
		max      time.Duration
		want     time.Duration
		wantNone bool
	}{
		{name: "seconds", code: 503, header: []string{"Retry-After", "120"}, want: 2 * time.Minute},
		{name: "seconds on 429", code: 429, header: []string{"Retry-After", " 7 "}, want: 7 * time.Second},
		{
			name: "http date", code: 503,
			header: []string{"Date", date.Format(http.TimeFormat), "Retry-After", date.Add(90 * time.Second).Format(http.TimeFormat)},
			want:   90 * time.Second,
		},
		{name: "seconds capped", code: 503, header: []string{"Retry-After", "3600"}, max: time.Minute, want: time.Minute},
		{
			name: "http date capped", code: 429, max: 30 * time.Second,
			header: []string{"Date", date.Format(http.TimeFormat), "Retry-After", date.Add(time.Hour).Format(http.TimeFormat)},
			want:   30 * time.Second,
		},
		{name: "below cap", code: 503, header: []string{"Retry-After", "5"}, max: time.Minute, want: 5 * time.Second},
		{name: "zero", code: 503, header: []string{"Retry-After", "0"}, wantNone: true},
		{name: "garbage", code: 503, header: []string{"Retry-After", "soon"}, wantNone: true},
		{
			name: "past date", code: 503, wantNone: true,
			header: []string{"Date", date.Format(http.TimeFormat), "Retry-After", date.Add(-time.Minute).Format(http.TimeFormat)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupHTTP(t, handlers.HTTPConfig{MaxRetryAfter: tt.max}, status(tt.code, "busy", tt.header...))
			err := b.handler.Handle(context.Background(), testEvent())
			if err == nil || handlers.IsPermanent(err) {
				t.Fatalf("Handle: %v, want a retryable error", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("http %d", tt.code)) {
				t.Errorf("error %q does not name status %d", err, tt.code)
			}
			d, ok := handlers.RetryDelay(err)
			if tt.wantNone {
				if ok {
					t.Fatalf("RetryDelay = %s, want none", d)
				}
				return
			}
			if !ok || d != tt.want {
				t.Fatalf("RetryDelay = %s, %v; want %s, true", d, ok, tt.want)
			}
		})
	}
}

// TestHTTPRetryAfterDateWithoutDateHeader measures an HTTP date from the
// local clock when the response has no Date header.
func TestHTTPRetryAfterDateWithoutDateHeader(t *testing.T) {
	t.Parallel()
	at := time.Now().Add(2 * time.Hour).UTC()
	b := setupHTTP(t, handlers.HTTPConfig{}, func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Date"] = nil // keep net/http from adding one
		w.Header().Set("Retry-After", at.Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	err := b.handler.Handle(context.Background(), testEvent())
	d, ok := handlers.RetryDelay(err)
	if !ok || d <= 2*time.Hour-time.Minute || d > 2*time.Hour {
		t.Fatalf("RetryDelay = %s, %v; want about 2h", d, ok)
	}
}

func TestHTTPPermanentExcerpt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want string
	}{
		{name: "long", body: strings.Repeat("x", 10_000), want: "http 400 Bad Request: " + strings.Repeat("x", 200) + "…"},
		{name: "whitespace", body: "  line one\r\n\n\tline   two  ", want: "http 400 Bad Request: line one line two"},
		{name: "binary", body: "a\x00b\xff\xfec", want: "http 400 Bad Request: a b\uFFFDc"},
		{name: "cut inside a rune", body: strings.Repeat("x", 199) + "é" + strings.Repeat("y", 50), want: "http 400 Bad Request: " + strings.Repeat("x", 199) + "…"},
		{name: "empty", body: "", want: "http 400 Bad Request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupHTTP(t, handlers.HTTPConfig{}, status(http.StatusBadRequest, tt.body))
			err := b.handler.Handle(context.Background(), testEvent())
			if !handlers.IsPermanent(err) {
				t.Fatalf("Handle: %v, want a permanent error", err)
			}
			got := err.Error()
			if got != tt.want {
				t.Errorf("error = %q\nwant    %q", got, tt.want)
			}
			if !utf8.ValidString(got) || strings.ContainsAny(got, "\x00\n") {
				t.Errorf("error %q is not one line of valid UTF-8 without NUL", got)
			}
		})
	}
}

func TestHTTPRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	var followed atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Add(1) }))
	t.Cleanup(target.Close)
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			b := setupHTTP(t, handlers.HTTPConfig{}, status(code, "", "Location", target.URL+"/elsewhere"))
			err := b.handler.Handle(context.Background(), testEvent())
			if !handlers.IsPermanent(err) {
				t.Fatalf("Handle: %v, want a permanent error", err)
			}
			want := fmt.Sprintf("http %d %s: redirect to %s/elsewhere not followed", code, http.StatusText(code), target.URL)
			if err.Error() != want {
				t.Errorf("error = %q, want %q", err, want)
			}
		})
	}
	// A client that follows redirects is made not to.
	b := setupHTTP(t, handlers.HTTPConfig{Client: &http.Client{}}, status(http.StatusFound, "", "Location", target.URL))
	if err := b.handler.Handle(context.Background(), testEvent()); !handlers.IsPermanent(err) {
		t.Fatalf("Handle with own client: %v, want a permanent error", err)
	}
	if n := followed.Load(); n != 0 {
		t.Fatalf("redirect target got %d requests, want 0", n)
	}
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload []byte
		headers map[string]string
		wantCT  string
	}{
		{name: "json", payload: []byte(`{"sku":"A-1","qty":2}`), wantCT: "application/json"},
		{name: "binary", payload: []byte("\x00\xff\xfe{\x00}\xc3\x28 not json\x00"), wantCT: "application/octet-stream"},
		{name: "empty", payload: nil, wantCT: "application/octet-stream"},
		{name: "content-type header", payload: []byte(`{"a":1}`), headers: map[string]string{"content-type": "application/vnd.order+json"}, wantCT: "application/vnd.order+json"},
		{name: "header case", payload: []byte("a,b\n1,2\n"), headers: map[string]string{"Content-TYPE": "text/csv; charset=utf-8"}, wantCT: "text/csv; charset=utf-8"},
		{name: "invalid content-type", payload: []byte("x"), headers: map[string]string{"content-type": "text/plain\r\nX-Evil: 1"}, wantCT: "application/octet-stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupHTTP(t, handlers.HTTPConfig{}, status(http.StatusNoContent, ""))
			ev := &handlers.Event{
				ID: 1, Source: "orders.v1", EventID: "0f8e-77", EventType: "order.created",
				Payload: tt.payload, Headers: tt.headers, Attempt: 2,
			}
			if err := b.handler.Handle(context.Background(), ev); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			got := <-b.requests
			if got.method != http.MethodPost {
				t.Errorf("method = %s, want POST", got.method)
			}
			if !bytes.Equal(got.body, tt.payload) {
				t.Errorf("body = %q, want %q", got.body, tt.payload)
			}
			for name, want := range map[string]string{
				"Idempotency-Key":  "orders.v1/0f8e-77",
				"Inbox-Event-Id":   "0f8e-77",
				"Inbox-Event-Type": "order.created",
				"Inbox-Source":     "orders.v1",
				"Inbox-Attempt":    "2",
				"Content-Type":     tt.wantCT,
			} {
				if v := got.header.Values(name); len(v) != 1 || v[0] != want {
					t.Errorf("header %s = %q, want %q", name, v, want)
				}
			}
			if got.header.Get("X-Evil") != "" {
				t.Errorf("an event header injected X-Evil")
			}
		})
	}
}

// blockingServer answers nothing until the request's context ends; arrived
// gets a value as each request comes in.
func blockingServer(t *testing.T) (url string, arrived chan struct{}) {
	t.Helper()
	arrived = make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	return srv.URL, arrived
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	url, _ := blockingServer(t)
	h, err := handlers.NewHTTP(handlers.HTTPConfig{URL: url, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Handle(context.Background(), testEvent())
	if err == nil || handlers.IsPermanent(err) {
		t.Fatalf("Handle: %v, want a retryable error", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no response within 50ms") {
		t.Errorf("error %q does not report the timeout", err)
	}
}

func TestHTTPContextCancel(t *testing.T) {
	t.Parallel()
	url, arrived := blockingServer(t)
	h, err := handlers.NewHTTP(handlers.HTTPConfig{URL: url, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.Handle(ctx, testEvent()) }()
	<-arrived
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || handlers.IsPermanent(err) {
			t.Fatalf("Handle: %v, want a retryable error wrapping context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Handle did not return after its context was cancelled")
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := handlers.NewHTTP(handlers.HTTPConfig{URL: "http://" + addr + "/hook?token=secret", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Handle(context.Background(), testEvent())
	if err == nil || handlers.IsPermanent(err) {
		t.Fatalf("Handle: %v, want a retryable error", err)
	}
	if !strings.Contains(err.Error(), "http POST http://"+addr+"/hook: ") || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q should name the target without its query", err)
	}
}

// TestHTTPConnectionReuse checks that bodies are drained, so that one
// connection serves every request whatever the outcome.
func TestHTTPConnectionReuse(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	codes := []int{200, 422, 503, 204, 404, 200}
	var n atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(codes[int(n.Add(1)-1)%len(codes)])
		_, _ = io.WriteString(w, strings.Repeat("body ", 1000)) // more than the excerpt
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	h, err := handlers.NewHTTP(handlers.HTTPConfig{URL: srv.URL, Timeout: 5 * time.Second, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	for range codes {
		_ = h.Handle(context.Background(), testEvent())
	}
	if got := conns.Load(); got != 1 {
		t.Fatalf("server saw %d connections for %d sequential requests, want 1", got, len(codes))
	}
}

func TestNewHTTPValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  handlers.HTTPConfig
		want string
	}{
		{handlers.HTTPConfig{URL: "", Timeout: time.Second}, "url: must be an absolute http or https URL"},
		{handlers.HTTPConfig{URL: "/hooks/inbox", Timeout: time.Second}, "url: must be an absolute http or https URL"},
		{handlers.HTTPConfig{URL: "orders.internal/hook", Timeout: time.Second}, "url: must be an absolute http or https URL"},
		{handlers.HTTPConfig{URL: "ftp://orders.internal/hook", Timeout: time.Second}, "url: must be an absolute http or https URL"},
		{handlers.HTTPConfig{URL: "http://", Timeout: time.Second}, "url: must be an absolute http or https URL"},
		{handlers.HTTPConfig{URL: "http:opaque", Timeout: time.Second}, "url: must be an absolute http or https URL"},
		{handlers.HTTPConfig{URL: "http://orders.internal:port/", Timeout: time.Second}, "url: must be an absolute http or https URL"},
		{handlers.HTTPConfig{URL: "http://orders.internal/hook"}, "timeout: must be greater than 0"},
		{handlers.HTTPConfig{URL: "http://orders.internal/hook", Timeout: -time.Second}, "timeout: must be greater than 0"},
		{handlers.HTTPConfig{URL: "http://orders.internal/hook", Timeout: time.Second, MaxRetryAfter: -1}, "max retry after: must not be negative"},
		{handlers.HTTPConfig{URL: "https://orders.internal/hook", Timeout: time.Second}, ""},
		{handlers.HTTPConfig{URL: "HTTP://orders.internal:8080/hook?x=1", Timeout: time.Second}, ""},
	}
	for _, tt := range tests {
		_, err := handlers.NewHTTP(tt.cfg)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("NewHTTP(%+v): %v", tt.cfg, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("NewHTTP(%+v) error = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// Rows are unique on (source, event id), so two rows can share an event id.
// Each must reach the sink with its own Idempotency-Key, or a receiver that
// deduplicates on it drops one of them.
func TestHTTPIdempotencyKeyUniquePerRow(t *testing.T) {
	t.Parallel()
	b := setupHTTP(t, handlers.HTTPConfig{}, status(http.StatusOK, ""))
	keys := map[string]string{}
	for _, source := range []string{"orders", "returns"} {
		ev := testEvent()
		ev.Source, ev.EventID = source, "42"
		if err := b.handler.Handle(context.Background(), ev); err != nil {
			t.Fatalf("Handle(%s): %v", source, err)
		}
		got := <-b.requests
		key := got.header.Get(handlers.HeaderIdempotencyKey)
		if other, ok := keys[key]; ok {
			t.Fatalf("rows (%s, 42) and (%s, 42) both sent Idempotency-Key %q", other, source, key)
		}
		keys[key] = source
		if id, src := got.header.Get(handlers.HeaderEventID), got.header.Get(handlers.HeaderSource); id != "42" || src != source {
			t.Errorf("Inbox-Event-Id %q, Inbox-Source %q; want 42, %s", id, src, source)
		}
	}
	if _, ok := keys["orders/42"]; !ok {
		t.Errorf("Idempotency-Keys %q, want orders/42 among them", keys)
	}
}

// The Idempotency-Key for every setting of HTTPConfig.IdempotencyKey, and a
// source holding "/" or "%", which must not make two rows share a key.
func TestHTTPIdempotencyKeyOption(t *testing.T) {
	t.Parallel()
	tests := []struct {
		option, source, eventID, want string
	}{
		{"", "orders", "42", "orders/42"},
		{handlers.IdempotencyKeySourceEventID, "orders", "42", "orders/42"},
		{handlers.IdempotencyKeyEventID, "orders", "42", "42"},
		{"", "a/b", "c", "a%2Fb/c"},
		{"", "a", "b/c", "a/b/c"},
		{"", "50%/x", "id", "50%25%2Fx/id"},
		{"", "", "id", "/id"},
	}
	for _, tt := range tests {
		t.Run(tt.option+" "+tt.source+" "+tt.eventID, func(t *testing.T) {
			t.Parallel()
			b := setupHTTP(t, handlers.HTTPConfig{IdempotencyKey: tt.option}, status(http.StatusOK, ""))
			ev := testEvent()
			ev.Source, ev.EventID = tt.source, tt.eventID
			if err := b.handler.Handle(context.Background(), ev); err != nil {
				t.Fatal(err)
			}
			got := <-b.requests
			if k := got.header.Get(handlers.HeaderIdempotencyKey); k != tt.want {
				t.Errorf("Idempotency-Key = %q, want %q", k, tt.want)
			}
			if tt.option == "" && handlers.IdempotencyKeyFor(ev) != tt.want {
				t.Errorf("IdempotencyKeyFor = %q, want %q", handlers.IdempotencyKeyFor(ev), tt.want)
			}
			if id := got.header.Get(handlers.HeaderEventID); id != tt.eventID {
				t.Errorf("Inbox-Event-Id = %q, want %q", id, tt.eventID)
			}
		})
	}
	_, err := handlers.NewHTTP(handlers.HTTPConfig{URL: "http://h/x", Timeout: time.Second, IdempotencyKey: "uuid"})
	if err == nil || err.Error() != `idempotency_key: must be source_event_id or event_id, not "uuid"` {
		t.Fatalf("NewHTTP with a bad IdempotencyKey: %v", err)
	}
}

// TestHTTPTraceContext changes the global propagator: it must not run in
// parallel (parallel tests wait until the sequential ones are done).
func TestHTTPTraceContext(t *testing.T) {
	b := setupHTTP(t, handlers.HTTPConfig{}, status(http.StatusNoContent, ""))
	ts, err := trace.ParseTraceState("congo=t61rcWkgMzE")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
	traced := trace.ContextWithSpanContext(context.Background(), sc)
	// An event header is not what is sent: the handler's context decides.
	ev := testEvent()
	ev.Headers = map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}

	send := func(ctx context.Context) http.Header {
		t.Helper()
		if err := b.handler.Handle(ctx, ev); err != nil {
			t.Fatalf("Handle: %v", err)
		}
		return (<-b.requests).header
	}

	// No propagator set (tracing off): no trace headers.
	if h := send(traced); h.Get("traceparent") != "" || h.Get("tracestate") != "" {
		t.Errorf("without a global propagator: traceparent %q, tracestate %q", h.Get("traceparent"), h.Get("tracestate"))
	}

	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() { otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) })

	h := send(traced)
	if got, want := h.Values("traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; len(got) != 1 || got[0] != want {
		t.Errorf("traceparent %q, want %q", got, want)
	}
	if got := h.Get("tracestate"); got != "congo=t61rcWkgMzE" {
		t.Errorf("tracestate %q", got)
	}
	if got := h.Get("Idempotency-Key"); got != "orders/evt-42" {
		t.Errorf("Idempotency-Key %q: the trace headers disturbed the others", got)
	}
	// A context without a span: nothing to send.
	if h := send(context.Background()); h.Get("traceparent") != "" {
		t.Errorf("context without a span: traceparent %q", h.Get("traceparent"))
	}
}
