package app

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/internal/testkit"
)

func TestDefaultHTTPServerLimits(t *testing.T) {
	t.Parallel()
	l := defaultHTTPServerLimits()
	if err := l.Validate(); err != nil || l.MaxConns <= 0 {
		t.Fatalf("limits %+v: every one must be set: %v", l, err)
	}
}

// runHTTPDaemon runs `inboxd run` (default route: ignore) in the test's
// process with env added, serving its HTTP endpoints on a local port (or
// on INBOXD_HTTP_ADDR when env sets it); it returns the address they are
// served on and the logs. The daemon stops when t ends.
func runHTTPDaemon(t *testing.T, env ...string) (string, *syncbuf.Buffer) {
	t.Helper()
	db := pgtest.New(t)
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, []byte("default: ignore\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env = append([]string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_ROUTES=" + routes, "INBOXD_HTTP_ADDR=127.0.0.1:0"}, env...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logs := &syncbuf.Buffer{}
	go func() { done <- Main(ctx, []string{"run"}, env, &bytes.Buffer{}, logs, Options{}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
	})
	var addr string
	testkit.WaitForReport(t, 30*time.Second, func() (bool, string) {
		m := regexp.MustCompile(`"addr":"([^"]+)"[^\n]*"message":"serving /metrics`).FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil, "the HTTP server's address in the logs:\n" + logs.String()
	})
	testkit.WaitFor(t, 30*time.Second, "the daemon ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr, logs
}

// holdConns opens n connections to addr, writes head on each and leaves
// them open until t ends.
func holdConns(t *testing.T, addr string, n int, head string) {
	t.Helper()
	for range n {
		testkit.RawConn(t, addr, head)
	}
}

// The reported case (issue 25, item 10): the daemon's HTTP server held 64
// connections and had no read timeout, so 64 requests with a
// Content-Length and no body (even GET /healthz) kept /healthz from
// answering for 75 s. With twice the cap of such requests, and as many
// connections that never finish their headers, held open, /healthz,
// /readyz and /metrics of the real daemon answer each probe within its
// 2 s timeout.
func TestDaemonProbesAnswerPastIdleConnections(t *testing.T) {
	t.Parallel()
	addr, _ := runHTTPDaemon(t)
	n := defaultHTTPServerLimits().MaxConns
	holdConns(t, addr, 2*n, "GET /healthz HTTP/1.1\r\nHost: inboxd\r\nContent-Length: 100\r\n\r\n")
	holdConns(t, addr, 2*n, "GET /healthz HTTP/1.1\r\nHost: inboxd\r\n")
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/healthz"} {
		start := time.Now()
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s with %d idle connections held: %v", path, 4*n, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", path, resp.Status)
		}
		t.Logf("GET %s answered in %s with %d idle connections held", path, time.Since(start).Round(time.Millisecond), 4*n)
	}
}
