package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/migrations/pgtest"
)

// binary is the inboxd binary built once (with -race) for the subprocess
// tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "inboxd-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "inboxd")
	// The daemon under test is built with the race detector, like the tests.
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build inboxd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is an inboxd process under test.
type daemon struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string
	logs *syncbuf.Buffer
	done chan struct{}
	err  error
}

// startDaemon runs `inboxd run` with env and waits until /readyz answers.
func startDaemon(t *testing.T, env ...string) *daemon {
	t.Helper()
	addr := freeAddr(t)
	d := &daemon{t: t, addr: addr, logs: &syncbuf.Buffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(binary, "run")
	d.cmd.Env = append(append(os.Environ(), "INBOXD_HTTP_ADDR="+addr, "INBOXD_LOG_LEVEL=debug"), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("inboxd logs:\n%s", d.logs.String())
		}
	})
	waitFor(t, 30*time.Second, "inboxd ready", func() bool {
		select {
		case <-d.done:
			t.Fatalf("inboxd exited early: %v\n%s", d.err, d.logs.String())
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return d
}

// kill sends SIGKILL and waits for the process to be gone.
func (d *daemon) kill() {
	d.t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// terminate sends SIGTERM and returns the exit code.
func (d *daemon) terminate(timeout time.Duration) int {
	d.t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(timeout):
		d.t.Fatalf("inboxd did not exit within %s of SIGTERM", timeout)
	}
	return d.cmd.ProcessState.ExitCode()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// sinkRequest is one request the HTTP sink received.
type sinkRequest struct {
	IdempotencyKey string
	EventType      string
	Source         string
	Attempt        int
	Body           []byte
}

// sink is an HTTP endpoint standing in for the service behind inboxd.
type sink struct {
	*httptest.Server
	mu       sync.Mutex
	requests []sinkRequest
	// hook, when set, runs before the response and may write it.
	hook func(w http.ResponseWriter, r *http.Request, req sinkRequest) bool
}

func newSink(t *testing.T) *sink {
	s := &sink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		attempt, _ := strconv.Atoi(r.Header.Get("Inbox-Attempt"))
		req := sinkRequest{
			IdempotencyKey: r.Header.Get("Idempotency-Key"),
			EventType:      r.Header.Get("Inbox-Event-Type"),
			Source:         r.Header.Get("Inbox-Source"),
			Attempt:        attempt,
			Body:           body,
		}
		s.mu.Lock()
		s.requests = append(s.requests, req)
		hook := s.hook
		s.mu.Unlock()
		if hook != nil && hook(w, r, req) {
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) byKey(key string) []sinkRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sinkRequest
	for _, r := range s.requests {
		if r.IdempotencyKey == key {
			out = append(out, r)
		}
	}
	return out
}

func writeRoutes(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func rowStatus(t *testing.T, db *pgtest.DB, eventID string) (status string, attempts int) {
	t.Helper()
	err := db.Pool.QueryRow(context.Background(),
		`SELECT status, attempts FROM inbox WHERE event_id = $1`, eventID).Scan(&status, &attempts)
	if err != nil {
		t.Fatalf("row %s: %v", eventID, err)
	}
	return status, attempts
}

func countStatus(t *testing.T, db *pgtest.DB, status string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE status = $1`, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
