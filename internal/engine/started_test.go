package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/worker"
)

// crashHelperEnv makes the test binary act as a worker process whose
// handler kills the process on the row with event id "poison" (see
// TestMain); its value is the database URL. crashModeEnv says which routes
// it registers (crashModeOrdered, or anything else for one unordered
// route).
const (
	crashHelperEnv   = "INBOXD_WORKER_TEST_CRASH_DB"
	crashModeEnv     = "INBOXD_WORKER_TEST_CRASH_MODE"
	crashModeOrdered = "ordered"
	// crashModeWide: four handlers at once, and the rows named "slow-…"
	// take 300 ms, so that they run beside the poison row when it kills
	// the process.
	crashModeWide = "wide"
	crashExitCode = 3
)

// crashRoutes registers the crash tests' route on reg: handler h for type
// "crash", ordered in crashModeOrdered.
func crashRoutes(reg *handlers.Registry, mode string, h func(context.Context, *handlers.Event) error) error {
	var opts []handlers.Option
	if mode == crashModeOrdered {
		opts = append(opts, handlers.Ordered(handlers.OnDeadBlock))
	}
	return reg.HandleFunc("crash", h, opts...)
}

// crashConfig is the crash helper's configuration (and the test's own
// rescuer's): a 1 s lease, 3 attempts, one handler at a time (four in
// crashModeWide).
func crashConfig(mode string) worker.Config {
	cfg := testConfig()
	cfg.Workers, cfg.Lease, cfg.MaxAttempts = 1, time.Second, 3
	if mode == crashModeWide {
		cfg.Workers = 4
	}
	cfg.RetryPolicy = worker.ExponentialBackoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}
	return cfg
}

// runCrashHelper runs a pool whose handler calls os.Exit on the row
// "poison", as a Go fatal error, an OOM kill or a log.Fatal in a library
// would end the process; every other row succeeds.
func runCrashHelper() int {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, os.Getenv(crashHelperEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	reg := handlers.NewRegistry()
	mode := os.Getenv(crashModeEnv)
	if err := crashRoutes(reg, mode, func(ctx context.Context, ev *handlers.Event) error {
		if ev.EventID == "poison" {
			os.Exit(crashExitCode)
		}
		if strings.HasPrefix(ev.EventID, "slow-") {
			return handlerSleep(ctx, 300*time.Millisecond)
		}
		return nil
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := crashConfig(mode)
	cfg.ID = "crashing-worker"
	p, err := New(db, reg, cfg, zerolog.New(os.Stderr), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_ = startstop.Run(ctx, p) // until the handler kills the process, or the test does
	return 0
}

// insertRow inserts one received row of type "crash" with the given key
// (nil: none).
func (b *bundle) insertRow(t *testing.T, eventID string, key []byte) {
	t.Helper()
	if _, err := b.db.Pool.Exec(context.Background(),
		`INSERT INTO inbox (source, event_id, event_type, key, payload) VALUES ('test', $1, 'crash', $2, '{}')`,
		eventID, key); err != nil {
		t.Fatal(err)
	}
}

// crashLoop runs the crash helper in a restart loop, as a supervisor
// would, until no row has work to come (none processing, none received
// but parked), or maxExits crashes happened. Before each start it inserts the round's
// fresh rows (rows streaming in), waits for the leases of the previous
// process to expire and rescues them with rescuer (a pool of the same
// configuration that is not running), so that every round begins from the
// same state. It returns the number of crashes.
func (b *bundle) crashLoop(t *testing.T, mode string, rescuer *Pool, maxExits int, fresh func(round int)) int {
	t.Helper()
	ctx := context.Background()
	done := func() bool {
		var left int // rows with work to come: processing, or received and not parked
		if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox
			WHERE status = 'processing' OR (status = 'received' AND available_at <> '9999-12-31 00:00:00+00')`).
			Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	}
	exits := 0
	for round := 0; ; round++ {
		if fresh != nil {
			fresh(round)
		}
		waitFor(t, 10*time.Second, "the previous process's leases expired", func() bool {
			var live int
			if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox
				WHERE status = 'processing' AND lease_expires_at >= now()`).Scan(&live); err != nil {
				t.Fatal(err)
			}
			return live == 0
		})
		if _, err := rescuer.Rescue(ctx); err != nil {
			t.Fatal(err)
		}
		if done() {
			return exits
		}
		if exits >= maxExits {
			return exits
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashHelperEnv+"="+b.db.URL, crashModeEnv+"="+mode)
		if testing.Verbose() {
			cmd.Stderr = os.Stderr
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.After(30 * time.Second)
	wait:
		for {
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != crashExitCode {
					t.Fatalf("crash helper ended with %v, want exit status %d", err, crashExitCode)
				}
				exits++
				break wait
			case <-time.After(20 * time.Millisecond):
				if done() {
					_ = cmd.Process.Kill()
					<-exited
					return exits
				}
			case <-deadline:
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("round %d: the crash helper neither crashed nor finished within 30s", round)
			}
		}
	}
}

// statesByID returns every row's status, attempts and last_error, for
// failure messages.
func (b *bundle) statesByID(t *testing.T) string {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(),
		`SELECT event_id, status, attempts, coalesce(last_error, '') FROM inbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sb strings.Builder
	for rows.Next() {
		var id, st, le string
		var n int
		if err := rows.Scan(&id, &st, &n, &le); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&sb, "\n  %s: %s, attempts %d, %q", id, st, n, le)
	}
	return sb.String()
}

// A handler that kills the process on a row that waited in the prefetch
// queue costs that row an attempt: it goes dead within max-attempts
// crashes, and the rows rescued with it (claimed, never started) lose
// nothing and are not starved behind it. Before the database knew of a
// queued row's start only at the next renewal tick: the crash came first,
// the rescuer refunded the attempt, and the row came back first in line
// every round.
func TestCrashingHandlerOnQueuedRowUsesUpItsAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := crashRoutes(b.reg, "", func(context.Context, *handlers.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	rescuer, err := New(b.db.Pool, b.reg, crashConfig(""), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Two rows before the poison one, six after it; each round two more
	// arrive before the restart, so the poison row never starts first.
	b.insertRow(t, "before-0", nil)
	b.insertRow(t, "before-1", nil)
	b.insertRow(t, "poison", nil)
	for i := range 6 {
		b.insertRow(t, fmt.Sprintf("after-%d", i), nil)
	}
	const maxAttempts = 3
	exits := b.crashLoop(t, "", rescuer, maxAttempts+2, func(round int) {
		b.insertRow(t, fmt.Sprintf("fresh-%d-0", round), nil)
		b.insertRow(t, fmt.Sprintf("fresh-%d-1", round), nil)
	})
	states := b.statesByID(t)
	p := b.row(t, "poison")
	if p.Status != "dead" || exits > maxAttempts {
		t.Fatalf("after %d crashes the poison row is %s with %d attempts; want dead within %d crashes; rows:%s",
			exits, p.Status, p.Attempts, maxAttempts, states)
	}
	if !strings.Contains(errString(p.LastError), "lease expired during attempt 3") {
		t.Errorf("poison row's last_error %q, want the lease expired during attempt 3", errString(p.LastError))
	}
	var notProcessed int
	if err := b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM inbox WHERE event_id <> 'poison' AND status <> 'processed'`).Scan(&notProcessed); err != nil {
		t.Fatal(err)
	}
	if notProcessed != 0 {
		t.Errorf("%d innocent rows not processed; rows:%s", notProcessed, states)
	}
}

// On an ordered route, a chain follower whose handler kills the process
// costs itself an attempt, not the head before it in the key's chain: the
// head had succeeded (its outcome not yet written when the follower
// started), so a rescue refunds its attempt, and it is processed, never
// dead. Before, the head was charged for every crash and went dead after
// three ("lease expired during attempt 3"), blocking its key, while the
// follower came back with attempts = 0 every time.
func TestCrashingChainFollowerUsesUpItsAttemptsNotItsHeads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := crashRoutes(b.reg, crashModeOrdered, func(context.Context, *handlers.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	rescuer, err := New(b.db.Pool, b.reg, crashConfig(crashModeOrdered), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.insertRow(t, "head", []byte("k1"))
	b.insertRow(t, "poison", []byte("k1"))
	for i := range 4 {
		b.insertRow(t, fmt.Sprintf("other-%d", i), []byte("k2"))
	}
	const maxAttempts = 3
	exits := b.crashLoop(t, crashModeOrdered, rescuer, maxAttempts+2, nil)
	states := b.statesByID(t)
	if h := b.row(t, "head"); h.Status != "processed" {
		t.Errorf("head (which succeeded every time) is %s after %d attempts, %q; want processed; rows:%s",
			h.Status, h.Attempts, errString(h.LastError), states)
	}
	if p := b.row(t, "poison"); p.Status != "dead" || exits > maxAttempts {
		t.Errorf("after %d crashes the poison follower is %s with %d attempts; want dead within %d crashes; rows:%s",
			exits, p.Status, p.Attempts, maxAttempts, states)
	}
	for i := range 4 {
		if r := b.row(t, fmt.Sprintf("other-%d", i)); r.Status != "processed" {
			t.Errorf("other-%d (another key) is %s; rows:%s", i, r.Status, states)
		}
	}
}

// The rows whose handlers ran beside the one that kills the process are
// charged for that crash (the database cannot tell which handler did it),
// but not for every crash after it: rescued after a started attempt, they
// are suspects, and a pool runs suspects one at a time, so the poison row
// crashes alone. Before, the four rows came back together every round and
// the three innocent ones went dead with the poison row.
func TestCrashingHandlerDoesNotTakeItsNeighboursWithIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := crashRoutes(b.reg, crashModeWide, func(context.Context, *handlers.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	rescuer, err := New(b.db.Pool, b.reg, crashConfig(crashModeWide), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		b.insertRow(t, fmt.Sprintf("slow-%d", i), nil)
	}
	b.insertRow(t, "poison", nil)
	const maxAttempts = 3
	exits := b.crashLoop(t, crashModeWide, rescuer, maxAttempts+2, nil)
	states := b.statesByID(t)
	if p := b.row(t, "poison"); p.Status != "dead" || exits > maxAttempts {
		t.Errorf("after %d crashes the poison row is %s with %d attempts; want dead within %d crashes; rows:%s",
			exits, p.Status, p.Attempts, maxAttempts, states)
	}
	for i := range 3 {
		if r := b.row(t, fmt.Sprintf("slow-%d", i)); r.Status != "processed" {
			t.Errorf("slow-%d, which ran beside the poison row, is %s after %d attempts; rows:%s", i, r.Status, r.Attempts, states)
		}
	}
}
