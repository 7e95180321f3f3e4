package app

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// serveTestHTTP serves a /healthz that answers "ok" with newHTTPServer and
// limits l on a local port; it returns the address.
func serveTestHTTP(t *testing.T, l httpServerLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	srv, sln := newHTTPServer(ln, mux, l)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// keepAliveGet opens a connection to addr, sends one keep-alive GET
// /healthz on it and reads the response; the connection stays open.
func keepAliveGet(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: inboxd\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /healthz: %s, close %v; want 200 on a kept-alive connection", resp.Status, resp.Close)
	}
	return c, r
}

// The reported case: idle keep-alive connections to /healthz were kept for
// ever, and enough of them used up the process's file descriptors (the
// workers' dials to http routes failed with "too many open files"). The
// server must close a connection left idle for its idle timeout.
func TestHTTPServerClosesIdleConnections(t *testing.T) {
	t.Parallel()
	l := defaultHTTPServerLimits()
	l.idle = 200 * time.Millisecond
	addr := serveTestHTTP(t, l)
	c, r := keepAliveGet(t, addr)
	start := time.Now()
	// The condition: the server closes its end, so the read returns EOF.
	// The deadline only bounds the wait (25 idle timeouts).
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := r.ReadByte()
	switch {
	case errors.Is(err, io.EOF):
		t.Logf("idle connection closed by the server after %s", time.Since(start).Round(time.Millisecond))
	case err == nil:
		t.Fatal("the server sent data on an idle connection")
	default:
		t.Fatalf("idle connection not closed by the server within 5s (idle timeout %s): %v", l.idle, err)
	}
}

func TestDefaultHTTPServerLimits(t *testing.T) {
	t.Parallel()
	l := defaultHTTPServerLimits()
	if l.readHeader <= 0 || l.idle <= 0 || l.write <= 0 || l.maxConns <= 0 {
		t.Fatalf("limits %+v: every one must be set", l)
	}
}

// The server holds at most maxConns connections: one more waits in the
// listen backlog, costing no file descriptor, until one of them closes.
func TestHTTPServerCapsConnections(t *testing.T) {
	t.Parallel()
	l := defaultHTTPServerLimits()
	l.maxConns = 1
	addr := serveTestHTTP(t, l)
	first, _ := keepAliveGet(t, addr)

	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := io.WriteString(second, "GET /healthz HTTP/1.1\r\nHost: inboxd\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(second)
	if err := second.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Peek(1); err == nil {
		t.Fatal("a second connection was served while the first, idle, held the only slot")
	}
	_ = first.Close()
	if err := second.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("the second connection was not served once the first closed: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %s", resp.Status)
	}
}
