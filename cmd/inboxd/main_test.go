package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
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
	if err := testkit.Build(".", binary, ".", true); err != nil {
		fmt.Fprintln(os.Stderr, "build inboxd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startDaemon runs `inboxd run` with env (and debug logs) and waits until
// /readyz answers (testkit's harness: killed when the test ends, its logs
// printed when the test fails, a data race failing it).
func startDaemon(t *testing.T, env ...string) *testkit.Daemon {
	t.Helper()
	return testkit.StartDaemon(t, testkit.DaemonSpec{Binary: binary, Env: append([]string{"INBOXD_LOG_LEVEL=debug"}, env...)})
}

// terminate sends SIGTERM to d and returns its exit code, failing the test
// when it is still running after timeout.
func terminate(t *testing.T, d *testkit.Daemon, timeout time.Duration) int {
	t.Helper()
	exited, _, code := d.Terminate(timeout)
	if !exited {
		t.Fatalf("inboxd did not exit within %s of SIGTERM", timeout)
	}
	return code
}

// The helpers every test of the binary uses, from internal/testkit.
var (
	freeAddr    = testkit.FreeAddr
	newSink     = testkit.NewSink
	writeRoutes = testkit.WriteRoutes
	waitFor     = testkit.WaitFor
)

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
