package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/opfiles"
	"github.com/inboxd/inboxd/internal/opfiles/routesfile"
)

func TestRoutesRegister(t *testing.T) {
	t.Parallel()
	for _, def := range []string{"", "dead", "ignore"} {
		t.Run("default "+def, func(t *testing.T) {
			t.Parallel()
			b := setupHTTP(t, handlers.HTTPConfig{}, status(http.StatusOK, ""))
			file := fmt.Sprintf(`
routes:
  - type: order.created
    handler: http
    url: %s/hooks/inbox
    timeout: 5s
  - type: order.audited
    handler: ignore
  - type: order.poisoned
    handler: dead
`, b.srv.URL)
			if def != "" {
				file += "default: " + def + "\n"
			}
			path := filepath.Join(t.TempDir(), "routes.yaml")
			if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			routes, err := routesfile.Load(path)
			if err != nil {
				t.Fatalf("LoadRoutes: %v", err)
			}
			reg, err := handlers.NewRegistryFromRoutes(routes, handlers.RegisterOptions{})
			if err != nil {
				t.Fatalf("NewRegistryFromRoutes: %v", err)
			}
			if n := reg.Types(); n != 3 {
				t.Errorf("Types() = %d, want 3", n)
			}
			handle := func(eventType string) error {
				t.Helper()
				route := reg.Lookup(eventType)
				if route.Handler == nil || route.Tx {
					t.Fatalf("Lookup(%q) = %+v, want a plain handler", eventType, route)
				}
				ev := testEvent()
				ev.EventType = eventType
				return route.Handler.Handle(context.Background(), ev)
			}

			if err := handle("order.created"); err != nil {
				t.Errorf("order.created: %v", err)
			}
			select {
			case r := <-b.requests:
				if got := r.header.Get("Inbox-Event-Type"); got != "order.created" {
					t.Errorf("server got event type %q", got)
				}
			default:
				t.Error("order.created did not reach the server")
			}
			if err := handle("order.audited"); err != nil {
				t.Errorf("order.audited: %v, want nil", err)
			}
			if err := handle("order.poisoned"); !handlers.IsPermanent(err) {
				t.Errorf("order.poisoned: %v, want a permanent error", err)
			}
			err = handle("order.unknown")
			if def == "ignore" {
				if err != nil {
					t.Errorf("unmatched type: %v, want nil", err)
				}
			} else if !handlers.IsPermanent(err) || !strings.Contains(err.Error(), `"order.unknown"`) {
				t.Errorf("unmatched type: %v, want a permanent error naming it", err)
			}
			select {
			case r := <-b.requests:
				t.Errorf("server got an unexpected request for %q", r.header.Get("Inbox-Event-Type"))
			default:
			}
		})
	}
}

func TestRoutesRegisterAllOrNothing(t *testing.T) {
	t.Parallel()
	routes, err := routesfile.Parse([]byte(`
routes:
  - {type: a, handler: ignore}
  - {type: b, handler: ignore}
default: ignore
`))
	if err != nil {
		t.Fatal(err)
	}
	reg := handlers.NewRegistry()
	if err := reg.HandleFunc("b", func(context.Context, *handlers.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err = routes.Register(reg, handlers.RegisterOptions{})
	if !errors.Is(err, handlers.ErrDuplicate) || !strings.Contains(err.Error(), `routes file: route 2 (type "b"): `) {
		t.Fatalf("Register: %v, want ErrDuplicate naming route 2", err)
	}
	if n := reg.Types(); n != 1 {
		t.Errorf("Types() = %d after a failed Register, want 1", n)
	}
	// The default is untouched too: still dead.
	ev := testEvent()
	ev.EventType = "zzz"
	if err := reg.Lookup("zzz").Handler.Handle(context.Background(), ev); !handlers.IsPermanent(err) {
		t.Errorf("default after failed Register: %v, want dead", err)
	}
}

// TestRoutesRegisterHandBuilt covers Routes made in Go rather than parsed:
// Register validates them itself.
func TestRoutesRegisterHandBuilt(t *testing.T) {
	t.Parallel()
	bad := &handlers.Routes{
		Routes: []handlers.RouteConfig{
			{Type: "a", Handler: "http", URL: "nope"},
			{Type: "b", Handler: "http", URL: "http://h/x", Timeout: time.Hour},
			{Type: "c", Handler: "ignore", URL: "http://h/x"},
			{Type: "", Handler: "dead"},
			{Type: "d", Handler: "smtp"},
			{Type: "e", Handler: "http", URL: "http://h/x", IdempotencyKey: "uuid"},
			{Type: "f", Handler: "dead", IdempotencyKey: "event_id"},
		},
		Default: "http",
	}
	err := bad.Register(handlers.NewRegistry(), handlers.RegisterOptions{})
	want := []string{
		`routes: route 1 (type "a"): url: must be an absolute http or https URL`,
		`routes: route 2 (type "b"): timeout: must be at most 10m0s`,
		`routes: route 3 (type "c"): url: not allowed for handler ignore`,
		`routes: route 4: type: required`,
		`routes: route 5 (type "d"): handler: unknown handler "smtp" (want http, ignore, dead or river)`,
		`routes: route 6 (type "e"): idempotency_key: must be source_event_id or event_id, not "uuid"`,
		`routes: route 7 (type "f"): idempotency_key: not allowed for handler dead`,
		`routes: default: must be dead or ignore, not "http"`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("Register error:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}

	dup := &handlers.Routes{Routes: []handlers.RouteConfig{{Type: "a", Handler: "dead"}, {Type: "a", Handler: "ignore"}}}
	err = dup.Register(handlers.NewRegistry(), handlers.RegisterOptions{})
	if err == nil || err.Error() != `routes: route 2 (type "a"): type: duplicate of route 1` {
		t.Fatalf("Register duplicate: %v", err)
	}

	ok := &handlers.Routes{Routes: []handlers.RouteConfig{{Type: "a", Handler: "http", URL: "http://h/x"}}}
	if _, err := handlers.NewRegistryFromRoutes(ok, handlers.RegisterOptions{MaxRetryAfter: time.Minute}); err != nil {
		t.Fatalf("NewRegistryFromRoutes: %v", err)
	}
}

// TestRoutesRegisterOptions checks that RouteOptions reach the http
// handlers: the client is used and Retry-After is capped.
func TestRoutesRegisterOptions(t *testing.T) {
	t.Parallel()
	b := setupHTTP(t, handlers.HTTPConfig{}, status(http.StatusServiceUnavailable, "", "Retry-After", "600"))
	var used bool
	client := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		used = true
		return http.DefaultTransport.RoundTrip(req)
	})}
	routes := &handlers.Routes{Routes: []handlers.RouteConfig{{Type: "a", Handler: "http", URL: b.srv.URL}}}
	reg, err := handlers.NewRegistryFromRoutes(routes, handlers.RegisterOptions{Client: client, MaxRetryAfter: 42 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = reg.Lookup("a").Handler.Handle(context.Background(), testEvent())
	if d, ok := handlers.RetryDelay(err); !ok || d != 42*time.Second {
		t.Errorf("RetryDelay(%v) = %s, %v; want 42s", err, d, ok)
	}
	if !used {
		t.Error("the client in RouteOptions was not used")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// A route's idempotency_key reaches the http handler it builds.
func TestRoutesIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setupHTTP(t, handlers.HTTPConfig{}, status(http.StatusOK, ""))
	routes, err := routesfile.Parse([]byte(fmt.Sprintf(`
routes:
  - {type: a, handler: http, url: %[1]q}
  - {type: b, handler: http, url: %[1]q, idempotency_key: source_event_id}
  - {type: c, handler: http, url: %[1]q, idempotency_key: event_id}
`, b.srv.URL)))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := handlers.NewRegistryFromRoutes(routes, handlers.RegisterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for eventType, want := range map[string]string{"a": "orders/evt-42", "b": "orders/evt-42", "c": "evt-42"} {
		ev := testEvent()
		ev.EventType = eventType
		if err := reg.Lookup(eventType).Handler.Handle(context.Background(), ev); err != nil {
			t.Fatalf("%s: %v", eventType, err)
		}
		if got := (<-b.requests).header.Get("Idempotency-Key"); got != want {
			t.Errorf("route %s: Idempotency-Key %q, want %q", eventType, got, want)
		}
	}
}

// A file of thousands of bad routes reports the first
// opfiles.MaxReported errors and a count of the rest, not one line
// per error (the same for Register's errors).
func TestRoutesErrorsAreBounded(t *testing.T) {
	t.Parallel()
	const n = 5000
	var b strings.Builder
	b.WriteString("routes:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {type: t%d, handler: teleport}\n", i)
	}
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := routesfile.Load(path)
	if err == nil {
		t.Fatal("LoadRoutes of 5,000 bad routes: no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != opfiles.MaxReported+1 {
		t.Fatalf("error of %d lines (%d bytes), want %d", len(lines), len(err.Error()), opfiles.MaxReported+1)
	}
	if !strings.Contains(lines[0], `route 1 (type "t0"): handler: unknown handler "teleport"`) {
		t.Errorf("first line %q does not name the first bad route", lines[0])
	}
	if want := fmt.Sprintf("%s: and %d more errors", path, n-opfiles.MaxReported); lines[len(lines)-1] != want {
		t.Errorf("last line %q, want %q", lines[len(lines)-1], want)
	}

	routes := &handlers.Routes{}
	for i := range n {
		routes.Routes = append(routes.Routes, handlers.RouteConfig{Type: fmt.Sprintf("t%d", i), Handler: "teleport"})
	}
	err = routes.Register(handlers.NewRegistry(), handlers.RegisterOptions{})
	if err == nil {
		t.Fatal("Register of 5,000 bad routes: no error")
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != opfiles.MaxReported+1 ||
		!strings.HasSuffix(lines[len(lines)-1], fmt.Sprintf("and %d more errors", n-opfiles.MaxReported)) {
		t.Errorf("Register: error of %d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

// A route's batch makes an http route a plain batch route and a river
// route a transactional one, both with the route's batch settings.
func TestRoutesRegisterBatch(t *testing.T) {
	t.Parallel()
	r := &handlers.Routes{Routes: []handlers.RouteConfig{
		{Type: "a", Handler: "http", URL: "http://h/x", Timeout: time.Second, Batch: handlers.Batch{MaxRows: 50, MaxWait: 10 * time.Millisecond}},
		{Type: "b", Handler: "river", Kind: "b_job", Batch: handlers.Batch{MaxRows: 20}},
		{Type: "c", Handler: "http", URL: "http://h/y", Timeout: time.Second},
	}}
	reg, err := handlers.NewRegistryFromRoutes(r, handlers.RegisterOptions{Jobs: &recordingInserter{}})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := reg.Lookup("a"), reg.Lookup("b"), reg.Lookup("c")
	if a.Batch == nil || a.Tx || a.Policy.Batch != (handlers.Batch{MaxRows: 50, MaxWait: 10 * time.Millisecond}) {
		t.Errorf("http batch route: batch %v, tx %v, policy %+v", a.Batch != nil, a.Tx, a.Policy.Batch)
	}
	if b.Batch == nil || !b.Tx || b.Policy.Batch.MaxRows != 20 {
		t.Errorf("river batch route: batch %v, tx %v, policy %+v", b.Batch != nil, b.Tx, b.Policy.Batch)
	}
	if c.Batch != nil || c.Policy.Batch.MaxRows != 0 {
		t.Errorf("http route without batch: batch %v, policy %+v", c.Batch != nil, c.Policy.Batch)
	}
	bad := &handlers.Routes{Routes: []handlers.RouteConfig{{Type: "d", Handler: "ignore", Batch: handlers.Batch{MaxRows: 5}}}}
	if err := bad.Register(handlers.NewRegistry(), handlers.RegisterOptions{}); err == nil || !strings.Contains(err.Error(), "batch: only for batch handlers") {
		t.Errorf("batch on an ignore route: %v", err)
	}
}
