package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// proxyChildURL, set in the environment, makes TestHTTPRouteUsesProxyEnvironment
// the child: it POSTs one event to that URL with an http handler on the
// shared client and prints the outcome. net/http reads the proxy variables
// once per process, so each case runs in a process of its own.
const proxyChildURL = "INBOXD_TEST_PROXY_CHILD_URL"

// An http route without a client of its own goes through the proxy that
// HTTP_PROXY / HTTPS_PROXY name, unless NO_PROXY lists the target's host
// (http.ProxyFromEnvironment).
func TestHTTPRouteUsesProxyEnvironment(t *testing.T) {
	if target := os.Getenv(proxyChildURL); target != "" {
		h, err := handlers.NewHTTP(handlers.HTTPConfig{URL: target, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = h.Handle(context.Background(), testEvent())
		fmt.Printf("outcome: %v\n", err)
		// The shared client keeps its connection to the proxy, which
		// TestMain's leak check would report: the child is done.
		os.Exit(0)
	}
	t.Parallel()
	var mu sync.Mutex
	var seen []string // "<method> <request URI> <Idempotency-Key>" as the proxy got them
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.RequestURI+" "+r.Header.Get(handlers.HeaderIdempotencyKey))
		mu.Unlock()
		if r.Method == http.MethodConnect {
			http.Error(w, "no tunnels here", http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusNoContent) // as the target would
	}))
	t.Cleanup(proxy.Close)

	tests := []struct {
		name, target string
		env          []string
		wantSeen     string // what the proxy got; "" for nothing
		wantOutcome  string // substring of the child's outcome line
	}{
		{"HTTP_PROXY", "http://orders.example/hook", []string{"HTTP_PROXY=" + proxy.URL},
			"POST http://orders.example/hook orders/evt-42", "outcome: <nil>"},
		{"HTTPS_PROXY", "https://orders.example/hook", []string{"HTTPS_PROXY=" + proxy.URL},
			"CONNECT orders.example:443 ", "outcome: http POST https://orders.example/hook"},
		{"NO_PROXY", "http://orders.example/hook", []string{"HTTP_PROXY=" + proxy.URL, "NO_PROXY=orders.example"},
			"", "outcome: http POST http://orders.example/hook"},
	}
	for _, tt := range tests {
		mu.Lock()
		seen = nil
		mu.Unlock()
		cmd := exec.Command(os.Args[0], "-test.run=^TestHTTPRouteUsesProxyEnvironment$", "-test.count=1")
		cmd.Env = append(os.Environ(), "HTTP_PROXY=", "HTTPS_PROXY=", "NO_PROXY=", "http_proxy=", "https_proxy=", "no_proxy=",
			proxyChildURL+"="+tt.target)
		cmd.Env = append(cmd.Env, tt.env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: child: %v\n%s", tt.name, err, out)
		}
		t.Logf("%s: child: %s", tt.name, strings.TrimSpace(string(out)))
		if !strings.Contains(string(out), tt.wantOutcome) {
			t.Errorf("%s: child said %q, want %q", tt.name, out, tt.wantOutcome)
		}
		mu.Lock()
		got := strings.Join(seen, "; ")
		mu.Unlock()
		if got != tt.wantSeen {
			t.Errorf("%s: the proxy got %q, want %q", tt.name, got, tt.wantSeen)
		}
	}
}
