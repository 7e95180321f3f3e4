package engine

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/internal/startstop"
)

// helperEnv makes the test binary act as a worker process (see TestMain).
const helperEnv = "INBOXD_WORKER_TEST_HELPER_DB"

// runHelperProcess runs a pool whose handler announces each row on stdout
// and then hangs, until the process is killed.
func runHelperProcess() int {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, os.Getenv(helperEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	reg := handlers.NewRegistry()
	_ = reg.HandleFunc("crash", func(ctx context.Context, ev *handlers.Event) error {
		fmt.Printf("STARTED %s\n", ev.EventID)
		<-ctx.Done()
		return ctx.Err()
	})
	cfg := testConfig()
	cfg.Lease = time.Second
	cfg.ID = "doomed-worker"
	p, err := New(db, reg, cfg, zerolog.New(os.Stderr), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_ = startstop.Run(ctx, p) // never returns: the test kills us
	return 0
}

// A worker process killed with SIGKILL mid-handler leaves its row in
// processing; once the lease expires the rescuer returns it and another
// worker processes it. The row's history keeps the killed worker's
// attempt as "lease expired".
func TestRescueAfterKilledWorkerProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, "crash", "e-1")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+b.db.URL)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if testing.Verbose() == false {
		cmd.Stderr = nil
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "STARTED "); ok {
				started <- id
				return
			}
		}
		close(started)
	}()
	select {
	case id, ok := <-started:
		if !ok || id != "e-1" {
			_ = cmd.Process.Kill()
			t.Fatalf("helper did not start handling e-1 (got %q)", id)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("helper process never picked the row up")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	if r := b.row(t, "e-1"); r.Status != "processing" || r.LeaseToken == nil {
		t.Fatalf("after SIGKILL row = %+v, want processing with the dead worker's lease", r)
	}

	var attemptSeen atomic.Int32
	if err := b.reg.HandleFunc("crash", func(_ context.Context, ev *handlers.Event) error {
		attemptSeen.Store(int32(ev.Attempt))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.RescueInterval = 100 * time.Millisecond
	b.start(t, cfg)
	waitFor(t, 15*time.Second, "row rescued and processed", func() bool { return b.row(t, "e-1").Status == "processed" })
	r := b.row(t, "e-1")
	if r.Attempts != 2 || attemptSeen.Load() != 2 {
		t.Fatalf("attempts = %d (handler saw %d), want 2", r.Attempts, attemptSeen.Load())
	}
	if !strings.Contains(errString(r.LastError), "doomed-worker") {
		t.Fatalf("last_error %q does not say which worker lost the row", errString(r.LastError))
	}
	// Its history: the killed worker's attempt, ended by its lease's
	// expiry (written by the rescue), then the attempt that processed it.
	h := b.history(t, "e-1")
	if got := outcomesOf(h); !slices.Equal(got, []string{"lease expired", outcomeProcessed}) {
		t.Fatalf("history %v (%+v), want lease expired, processed", got, h)
	}
	if a := h[0]; a.Attempt != 1 || a.Worker != "doomed-worker" || !strings.HasPrefix(a.Error, maintenance.ExpiredPrefix+"1 (worker doomed-worker") ||
		a.FinishedAt.Before(a.StartedAt) || h[1].Attempt != 2 || h[1].Worker == "doomed-worker" {
		t.Errorf("history %+v: want attempt 1 lost by doomed-worker, attempt 2 by another", h)
	}
}

// Rows whose lease expired on their last attempt go dead, not back to
// received.
func TestRescueOutOfAttemptsGoesDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, "x", "e-1")
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `UPDATE inbox SET status = 'processing', attempts = 3, lease_token = 1,
		lease_expires_at = now() - interval '1 second', locked_by = 'gone'`); err != nil {
		t.Fatal(err)
	}
	p := b.start(t, testConfig()) // MaxAttempts 3
	waitFor(t, 10*time.Second, "row dead", func() bool { return b.row(t, "e-1").Status == "dead" })
	if n, err := p.Rescue(ctx); err != nil || n != 0 {
		t.Fatalf("second Rescue = %d, %v", n, err)
	}
}
