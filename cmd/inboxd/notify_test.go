package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// notifySocket is a stand-in for systemd's notification socket.
type notifySocket struct {
	path string
	mu   sync.Mutex
	msgs []string
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	// Unix socket paths are short; t.TempDir() may be too long.
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &notifySocket{path: filepath.Join(dir, "notify")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, string(buf[:n]))
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *notifySocket) count(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// Under systemd (Type=notify) the daemon says READY=1 once it works, feeds
// the watchdog while its loops make progress, and says STOPPING=1 on
// SIGTERM.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	sock := newNotifySocket(t)
	d := startDaemon(t, "INBOXD_DATABASE_URL="+db.URL, "INBOXD_ROUTES="+writeRoutes(t, "default: ignore\n"),
		"NOTIFY_SOCKET="+sock.path, "WATCHDOG_USEC=1000000")
	waitFor(t, 10*time.Second, "READY=1", func() bool { return sock.count("READY=1") == 1 })
	waitFor(t, 10*time.Second, "watchdog fed", func() bool { return sock.count("WATCHDOG=1") >= 3 })
	if code := terminate(t, d, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if sock.count("STOPPING=1") != 1 {
		t.Errorf("no STOPPING=1 at SIGTERM; got %q", sock.msgs)
	}
}

// Health is served from the first moment: with the database unreachable at
// start, /healthz answers 200 (liveness never depends on the database, so
// an orchestrator does not restart the pod for it) and /readyz 503.
func TestHealthBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	dead := freeAddr(t) // nothing listens there
	d := testkit.StartDaemon(t, testkit.DaemonSpec{Binary: binary, NoWait: true, Env: []string{
		"INBOXD_ROUTES=" + writeRoutes(t, "default: ignore\n"),
		"INBOXD_DATABASE_URL=postgres://postgres@" + dead + "/postgres?sslmode=disable&connect_timeout=1",
	}})
	status := func(path string) int {
		resp, err := http.Get("http://" + d.Addr() + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, 10*time.Second, "/healthz served", func() bool { return status("/healthz") == http.StatusOK })
	if got := status("/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d with the database unreachable, want 503", got)
	}
	// The first connection attempt may still be under way when /healthz
	// answers.
	waitFor(t, 10*time.Second, "the wait for the database logged", func() bool {
		return strings.Contains(d.Logs(), "database not reachable yet")
	})
}

// With no routes file and no Go handlers, `run` would dead-letter every
// event (a typo in INBOXD_ROUTES once sent a 1,000-row backlog to dead):
// it exits 2 with one line saying so.
func TestRunWithoutRoutesRefuses(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cmd := exec.Command(binary, "run")
	cmd.Env = append(os.Environ(), "INBOXD_DATABASE_URL="+db.URL, "INBOXD_HTTP_ADDR=", "INBOXD_ROUTE=routes.yaml")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 2 {
		t.Fatalf("exit code %d, want 2; output:\n%s", code, out)
	}
	var errLines []string
	for _, l := range logLines(t, "run without routes", string(out)) {
		if l["level"] == "error" {
			errLines = append(errLines, fmt.Sprint(l["error"]))
		}
	}
	if len(errLines) != 1 || !strings.Contains(errLines[0], "INBOXD_ROUTES") {
		t.Fatalf("want one error line naming INBOXD_ROUTES, got:\n%s", out)
	}
	if n := countStatus(t, db, "dead"); n != 0 {
		t.Fatalf("%d rows dead-lettered", n)
	}
}
