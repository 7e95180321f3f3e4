package faultsuite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// bins are the programs under test, built once in TestMain.
var bins *Binaries

// enabled: the suite runs only when asked for (make fault / fault-long).
var enabled = os.Getenv("INBOXD_FAULT") == "1" || os.Getenv("INBOXD_FAULT_LONG") == "1"

// long selects the longer variant of every scenario (make fault-long).
var long = os.Getenv("INBOXD_FAULT_LONG") == "1"

// cpu shares the two cores between scenarios running in parallel: a
// scenario takes weight units of cpuUnits, so heavy ones (fast streams,
// several race-built daemons) run alone or beside light ones (slow
// handlers, mostly sleeping) and timing-sensitive assertions are not
// starved by a neighbour. INBOXD_FAULT_CPU changes the capacity.
var (
	cpuUnits = int64(4)
	cpu      *semaphore.Weighted
)

func TestMain(m *testing.M) {
	if !enabled {
		fmt.Println("faultsuite: fault scenarios skipped (set INBOXD_FAULT=1, or run make fault / make fault-long); the other tests run")
		code := m.Run()
		if raceInboxd != "" {
			os.RemoveAll(filepath.Dir(raceInboxd))
		}
		os.Exit(code)
	}
	if v, err := strconv.Atoi(os.Getenv("INBOXD_FAULT_CPU")); err == nil && v > 0 {
		cpuUnits = int64(v)
	}
	cpu = semaphore.NewWeighted(cpuUnits)
	if n := SweepStaleClusters(); n > 0 {
		fmt.Printf("faultsuite: removed %d PostgreSQL clusters left by earlier runs\n", n)
	}
	start := time.Now()
	var err error
	bins, err = Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultsuite: build:", err)
		os.Exit(1)
	}
	fmt.Printf("faultsuite: built inboxd and embedder with -race in %s (long=%v)\n", time.Since(start).Round(100*time.Millisecond), long)
	code := m.Run()
	bins.Close()
	os.Exit(code)
}

// Scenario weights for the cpu semaphore.
const (
	light = 1 // mostly sleeping handlers, a trickle of rows
	heavy = 3 // streams at full rate, several daemons
	alone = 4 // needs the machine to itself
)

// scenario starts a scenario: it skips unless the suite is enabled, runs
// the test in parallel with others, and takes its share of the CPU for
// the rest of the test.
func scenario(t *testing.T, weight int64) {
	t.Helper()
	if !enabled {
		t.Skip("fault-injection suite: set INBOXD_FAULT=1 (make fault)")
	}
	t.Parallel()
	weight = min(weight, cpuUnits)
	waitStart := time.Now()
	if err := cpu.Acquire(context.Background(), weight); err != nil {
		t.Fatal(err)
	}
	if w := time.Since(waitStart); w > time.Second {
		t.Logf("waited %s for CPU share %d/%d", w.Round(100*time.Millisecond), weight, cpuUnits)
	}
	t.Cleanup(func() { cpu.Release(weight) })
}

// pick returns short, or long in the long variant.
func pick[T any](short, longV T) T {
	if long {
		return longV
	}
	return short
}

// scale returns a timeout proportional to the variant.
func scale(d time.Duration) time.Duration {
	if long {
		return d * 4
	}
	return d
}

// sharedDB is a migrated per-test database on the shared server.
func sharedDB(t *testing.T) *pgtest.DB { return pgtest.New(t) }

// writeRoutes writes a routes file and returns its path.
var writeRoutes = testkit.WriteRoutes

// httpRoute routes types to the sink with the built-in http handler.
func httpRoute(sink *Sink, types ...string) string {
	var b strings.Builder
	b.WriteString("routes:\n")
	for _, typ := range types {
		fmt.Fprintf(&b, "  - type: %s\n    handler: http\n    url: %s\n    timeout: 30s\n", typ, sink.URL())
	}
	return b.String()
}

// baseEnv is the configuration every scenario's daemons share.
func baseEnv(dbURL string, lease time.Duration, workers int, extra ...string) []string {
	return append([]string{
		"INBOXD_DATABASE_URL=" + dbURL,
		"INBOXD_LEASE=" + lease.String(),
		"INBOXD_WORKERS=" + strconv.Itoa(workers),
		"INBOXD_BACKOFF_BASE=100ms",
		"INBOXD_BACKOFF_MAX=1s",
		"INBOXD_LOG_LEVEL=info",
	}, extra...)
}

// runsFile is a fresh path for the embedder's FAULT_RUNS_FILE.
func runsFile(t *testing.T) string { return filepath.Join(t.TempDir(), "runs.log") }

// mixedTypes alternates: every third event transactional, the rest http.
func mixedTypes(i int) string {
	if i%3 == 0 {
		return "tx.effect"
	}
	return "http.effect"
}
