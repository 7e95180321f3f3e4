// Package testkit is inboxd's test infrastructure written once: waiting for
// a condition, writing a routes file, a free loopback address, a raw
// connection that sends what a hand-written client sends, building a
// program (with the race detector) for a test to run, an HTTP sink standing
// in for the service behind the daemon, and a daemon process harness.
//
// It is for tests only, in any of the repository's modules (the main one,
// deploy, the fault suite, the benchmarks). Besides the standard library it
// imports only handlers (the names of the headers the http handler sets),
// internal/syncbuf and internal/netfault (ProxyTo), so it adds nothing to an
// embedder's module graph;
// the handlers package's own tests cannot use it (an import cycle).
package testkit

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PollInterval is how often WaitFor and WaitForReport evaluate their
// condition.
const PollInterval = 10 * time.Millisecond

// WaitFor evaluates cond every PollInterval until it holds, and fails t
// (naming what it waited for) once timeout has passed without it.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	WaitForReport(t, timeout, func() (bool, string) { return cond(), what })
}

// WaitForReport is WaitFor for a condition that describes itself: cond
// returns whether it holds and what it is (or what it last saw), printed
// when timeout passes without it.
func WaitForReport(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, desc)
		}
		time.Sleep(PollInterval)
	}
}

// WriteRoutes writes body as a routes file in t's temporary directory and
// returns its path.
func WriteRoutes(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// FreeAddr returns a loopback host:port that was free a moment ago, for a
// process under test to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// RawConn opens a TCP connection to addr and writes head on it (bytes as a
// hand-written client sends them: part of a request, a request without its
// body); the connection is closed when t ends.
func RawConn(t testing.TB, addr, head string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	return c
}
