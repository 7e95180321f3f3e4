package faultsuite

import (
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testkit"
)

// ReadyTimeout bounds how long StartDaemon waits for /readyz.
const ReadyTimeout = testkit.ReadyTimeout

// DaemonSpec describes a process to start (testkit's, shared with the
// binary's tests).
type DaemonSpec = testkit.DaemonSpec

// Daemon is one inboxd (or embedder) process started with `run`: the
// harness of internal/testkit (start, /readyz, signals, measured exits,
// peak RSS, logs printed when a test fails, data races failing it) with
// the suite's metrics scraping.
type Daemon struct {
	*testkit.Daemon
}

// StartDaemon starts spec's process, and unless spec.NoWait waits until
// /readyz answers 200 (testkit.StartDaemon).
func StartDaemon(t testing.TB, spec DaemonSpec) *Daemon {
	t.Helper()
	return &Daemon{testkit.StartDaemon(t, spec)}
}

// Metrics scrapes /metrics.
func (d *Daemon) Metrics() (Metrics, error) { return ScrapeMetrics(d.Addr(), 5*time.Second) }

// LogDigest counts a zerolog JSON log's warn and error lines by message
// (testkit.LogDigest).
func LogDigest(logs string, top int) string { return testkit.LogDigest(logs, top) }

// cleanEnv is the test's environment without INBOXD_*, FAULT_* and GORACE.
func cleanEnv() []string { return testkit.CleanEnv() }

// tail returns the last n bytes of s.
func tail(s string, n int) string { return testkit.Tail(s, n) }
