package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/worker"
)

// Eight concurrent workers in two separate pools (each on its own
// connection pool, as two replicas would be) must hand every row to exactly
// one handler call.
func TestClaimExclusivity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 2000
	var mu sync.Mutex
	calls := make(map[string]int)
	var byPool [2]atomic.Int64
	b.insert(t, "order.created", ids("e", n)...)

	// Each pool gets its own registry so we can tell which pool ran a row.
	for i := range 2 {
		reg := handlers.NewRegistry()
		if err := reg.HandleFunc("order.created", func(_ context.Context, ev *handlers.Event) error {
			mu.Lock()
			calls[ev.EventID]++
			mu.Unlock()
			byPool[i].Add(1)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.ClaimBatch = 16
		pb := &bundle{db: b.db, reg: reg}
		pb.start(t, cfg)
	}

	waitFor(t, 60*time.Second, "all rows processed", func() bool { return b.countStatus(t, "processed") == n })
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != n {
		t.Fatalf("handled %d distinct events, want %d", len(calls), n)
	}
	for id, c := range calls {
		if c != 1 {
			t.Fatalf("event %s handled %d times", id, c)
		}
	}
	if byPool[0].Load() == 0 || byPool[1].Load() == 0 {
		t.Fatalf("one pool did no work (%d / %d): the race was not run", byPool[0].Load(), byPool[1].Load())
	}
	var maxAttempts int
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT max(attempts) FROM inbox`).Scan(&maxAttempts); err != nil {
		t.Fatal(err)
	}
	if maxAttempts != 1 {
		t.Fatalf("a row was claimed %d times", maxAttempts)
	}
}

// A row inserted with plain SQL is picked up within a second through the
// trigger's notification (polling is set far slower to rule it out).
func TestPlainInsertWakesWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan time.Time, 1)
	if err := b.reg.HandleFunc("ping", func(context.Context, *handlers.Event) error {
		got <- time.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.PollInterval = time.Minute
	b.start(t, cfg)

	inserted := time.Now()
	b.insert(t, "ping", "p-1")
	select {
	case at := <-got:
		if d := at.Sub(inserted); d > time.Second {
			t.Fatalf("picked up after %s, want under 1s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("row not picked up: notification did not wake the workers")
	}
	waitFor(t, 5*time.Second, "row processed", func() bool { return b.row(t, "p-1").Status == "processed" })
}

// With the trigger disabled, polling alone still finds the row.
func TestPollingFallback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan struct{}, 1)
	if err := b.reg.HandleFunc("ping", func(context.Context, *handlers.Event) error {
		got <- struct{}{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(context.Background(), `ALTER TABLE inbox DISABLE TRIGGER inbox_notify_received`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.PollInterval = 200 * time.Millisecond
	b.start(t, cfg)
	b.insert(t, "ping", "p-1")
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("polling did not pick the row up")
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		handler     func(attempts *atomic.Int32) handlers.HandlerFunc
		wantStatus  string
		wantAttempt int
		wantError   string // substring of last_error
		wantCalls   int32
	}{
		{
			name: "success",
			handler: func(*atomic.Int32) handlers.HandlerFunc {
				return func(context.Context, *handlers.Event) error { return nil }
			},
			wantStatus: "processed", wantAttempt: 1, wantCalls: 1,
		},
		{
			name: "permanent error goes dead at once with the reason",
			handler: func(*atomic.Int32) handlers.HandlerFunc {
				return func(context.Context, *handlers.Event) error {
					return handlers.Permanent(errors.New("sku 42 does not exist"))
				}
			},
			wantStatus: "dead", wantAttempt: 1, wantError: "sku 42 does not exist", wantCalls: 1,
		},
		{
			name: "retryable error until attempts are used up",
			handler: func(*atomic.Int32) handlers.HandlerFunc {
				return func(context.Context, *handlers.Event) error { return errors.New("upstream down") }
			},
			wantStatus: "dead", wantAttempt: 3, wantError: "attempt 3 of 3: upstream down", wantCalls: 3,
		},
		{
			name: "panic is recovered and retried",
			handler: func(calls *atomic.Int32) handlers.HandlerFunc {
				return func(context.Context, *handlers.Event) error {
					if calls.Load() == 1 {
						panic("nil map")
					}
					return nil
				}
			},
			wantStatus: "processed", wantAttempt: 2, wantError: "handler panicked: nil map", wantCalls: 2,
		},
		{
			name: "unrouted type goes to the default (dead)",
			handler: func(*atomic.Int32) handlers.HandlerFunc {
				return nil
			},
			wantStatus: "dead", wantAttempt: 1, wantError: `no handler for event type "order.created"`, wantCalls: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var calls atomic.Int32
			if h := tt.handler(&calls); h != nil {
				if err := b.reg.HandleFunc("order.created", func(ctx context.Context, ev *handlers.Event) error {
					calls.Add(1)
					return h(ctx, ev)
				}); err != nil {
					t.Fatal(err)
				}
			}
			b.insert(t, "order.created", "e-1")
			b.start(t, testConfig())
			waitFor(t, 10*time.Second, "final status "+tt.wantStatus, func() bool {
				return b.row(t, "e-1").Status == tt.wantStatus
			})
			r := b.row(t, "e-1")
			if r.Attempts != tt.wantAttempt {
				t.Errorf("attempts = %d, want %d", r.Attempts, tt.wantAttempt)
			}
			if !strings.Contains(errString(r.LastError), tt.wantError) {
				t.Errorf("last_error = %q, want it to contain %q", errString(r.LastError), tt.wantError)
			}
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("handler called %d times, want %d", got, tt.wantCalls)
			}
			if r.LeaseToken != nil {
				t.Errorf("lease token left on a finished row")
			}
			if (tt.wantStatus == "processed") != (r.ProcessedAt != nil) {
				t.Errorf("processed_at = %v for status %s", r.ProcessedAt, r.Status)
			}
		})
	}
}

// A failed attempt is rescheduled by the retry policy: available_at is
// pushed back by exactly the delay the (injected) policy gives, and
// handlers.RetryAfter overrides it, capped at MaxRetryDelay.
func TestRetryScheduling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want time.Duration
	}{
		{"policy delay with jitter", errors.New("boom"), 7500 * time.Millisecond}, // base 10s, rand 0.5 → 5s + 2.5s
		{"retry-after honoured", handlers.RetryAfter(42*time.Second, errors.New("429")), 42 * time.Second},
		{"retry-after capped", handlers.RetryAfter(time.Hour, errors.New("429")), time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if err := b.reg.HandleFunc("x", func(context.Context, *handlers.Event) error { return tt.err }); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig()
			cfg.RetryPolicy = worker.ExponentialBackoff{Base: 10 * time.Second, Max: time.Hour, Rand: func() float64 { return 0.5 }}
			cfg.MaxRetryDelay = time.Minute
			b.insert(t, "x", "e-1")
			b.start(t, cfg)
			waitFor(t, 10*time.Second, "row rescheduled", func() bool {
				r := b.row(t, "e-1")
				return r.Status == "received" && r.Attempts == 1
			})
			r := b.row(t, "e-1")
			// available_at and updated_at are set by the same statement's now().
			if got := r.AvailableAt.Sub(r.UpdatedAt); got != tt.want {
				t.Fatalf("rescheduled %s after the failure, want %s", got, tt.want)
			}
		})
	}
}

// worker.ExponentialBackoff is the daemon's one backoff rule (internal/backoff,
// tested there) as a worker.RetryPolicy.
func TestExponentialBackoffIsTheSharedRule(t *testing.T) {
	t.Parallel()
	b := worker.ExponentialBackoff{Base: time.Second, Max: time.Minute, Rand: func() float64 { return 0 }}
	for attempt, want := range map[int]time.Duration{1: 500 * time.Millisecond, 3: 2 * time.Second, 50: 30 * time.Second} {
		if got := b.NextRetry(attempt); got != want {
			t.Errorf("NextRetry(%d) = %s, want %s", attempt, got, want)
		}
	}
}

// A transactional handler's writes commit with the row's move to processed,
// and roll back with a failed attempt.
func TestTxHandlerAtomicity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `CREATE TABLE ledger (event_id text NOT NULL, attempt int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := b.reg.HandleTx("payment.captured", handlers.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger VALUES ($1, $2)`, ev.EventID, ev.Attempt); err != nil {
			return err
		}
		if ev.Attempt == 1 {
			return errors.New("ledger check failed")
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "payment.captured", "pay-1")
	b.start(t, testConfig())
	waitFor(t, 10*time.Second, "row processed", func() bool { return b.row(t, "pay-1").Status == "processed" })

	rows, err := b.db.Pool.Query(ctx, `SELECT attempt FROM ledger WHERE event_id = 'pay-1'`)
	if err != nil {
		t.Fatal(err)
	}
	attempts, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 1 || attempts[0] != 2 {
		t.Fatalf("ledger rows by attempt = %v, want exactly [2]: the failed attempt's write must roll back", attempts)
	}
	r := b.row(t, "pay-1")
	if r.Attempts != 2 || !strings.Contains(errString(r.LastError), "ledger check failed") {
		t.Fatalf("row = %+v", r)
	}
}

// A worker whose lease expired cannot complete the row: another worker
// rescued and claimed it, and the late completion is counted, not applied,
// while the second worker still holds the row.
func TestFencedCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	slowEntered, slowRelease := make(chan struct{}), make(chan struct{})
	slowReg := handlers.NewRegistry()
	if err := slowReg.HandleFunc("x", func(context.Context, *handlers.Event) error {
		close(slowEntered)
		<-slowRelease
		return nil // would mark processed, were it not fenced
	}); err != nil {
		t.Fatal(err)
	}
	// One worker and no prefetch: busy with the row, the slow pool cannot
	// claim it again once it is rescued; only the fast pool can.
	slowCfg := testConfig()
	slowCfg.Workers, slowCfg.Prefetch = 1, -1
	slow := (&bundle{db: b.db, reg: slowReg}).start(t, slowCfg)
	b.insert(t, "x", "e-1")
	<-slowEntered

	// The lease runs out, as if the slow worker had stalled past it.
	if _, err := b.db.Pool.Exec(ctx, `UPDATE inbox SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	fastEntered, fastRelease := make(chan struct{}), make(chan struct{})
	fastReg := handlers.NewRegistry()
	if err := fastReg.HandleFunc("x", func(context.Context, *handlers.Event) error {
		close(fastEntered)
		<-fastRelease
		return handlers.Permanent(errors.New("second worker's verdict"))
	}); err != nil {
		t.Fatal(err)
	}
	// A rescuer (the second pool's runs at its start) returns the row; only
	// the second pool has room to claim it.
	fast := (&bundle{db: b.db, reg: fastReg}).start(t, testConfig())
	<-fastEntered
	var fastToken int64
	if err := b.db.Pool.QueryRow(ctx, `SELECT lease_token FROM inbox`).Scan(&fastToken); err != nil {
		t.Fatal(err)
	}

	// The first worker finishes while the second holds the row.
	close(slowRelease)
	waitFor(t, 10*time.Second, "late completion fenced", func() bool {
		return testutil.ToFloat64(slow.metrics.fenced) == 1
	})
	r := b.row(t, "e-1")
	if r.Status != "processing" || r.LeaseToken == nil || *r.LeaseToken != fastToken || r.Attempts != 2 {
		t.Fatalf("fenced completion changed the row: %+v", r)
	}
	if got := testutil.ToFloat64(slow.metrics.completed.WithLabelValues(outcomeProcessed, "x")); got != 0 {
		t.Fatalf("fenced completion counted as processed %v times", got)
	}

	close(fastRelease)
	waitFor(t, 10*time.Second, "second worker's outcome", func() bool { return b.row(t, "e-1").Status == "dead" })
	if r := b.row(t, "e-1"); !strings.Contains(errString(r.LastError), "second worker's verdict") {
		t.Fatalf("last_error = %q", errString(r.LastError))
	}
	// Either pool's rescuer may have returned the row; exactly one did.
	rescued := testutil.ToFloat64(fast.metrics.maintenance.Rescued.WithLabelValues("received")) +
		testutil.ToFloat64(slow.metrics.maintenance.Rescued.WithLabelValues("received"))
	if rescued != 1 {
		t.Fatalf("rescued = %v, want 1", rescued)
	}
}

// A long handler keeps its row by renewing the lease; when renewal finds the
// row fenced, the handler's context is cancelled with the lease-lost cause.
func TestLeaseRenewalAndLoss(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := testConfig()
	cfg.Lease = 900 * time.Millisecond

	entered := make(chan struct{})
	cause := make(chan error, 1)
	if err := b.reg.HandleFunc("long", func(ctx context.Context, _ *handlers.Event) error {
		close(entered)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	p := b.start(t, cfg)
	b.insert(t, "long", "e-1")
	<-entered

	// Outlive three leases: renewal must keep the row from being rescued.
	var first time.Time
	if err := b.db.Pool.QueryRow(ctx, `SELECT lease_expires_at FROM inbox`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "lease renewed past three lease periods", func() bool {
		var cur time.Time
		if err := b.db.Pool.QueryRow(ctx, `SELECT lease_expires_at FROM inbox`).Scan(&cur); err != nil {
			t.Fatal(err)
		}
		return cur.Sub(first) > 3*cfg.Lease
	})
	if n, err := p.Rescue(ctx); err != nil || n != 0 {
		t.Fatalf("Rescue took a row with a live renewed lease: %d, %v", n, err)
	}
	if r := b.row(t, "e-1"); r.Status != "processing" || r.Attempts != 1 {
		t.Fatalf("row = %+v, want still processing on attempt 1", r)
	}

	// Another worker takes the row over: the next renewal is fenced.
	if _, err := b.db.Pool.Exec(ctx, `UPDATE inbox SET lease_token = lease_token + 1`); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-cause:
		if !errors.Is(got, errLeaseLost) {
			t.Fatalf("handler cancelled with %v, want lease lost", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler not cancelled after its lease was fenced")
	}
	waitFor(t, 5*time.Second, "lease loss counted", func() bool { return testutil.ToFloat64(p.metrics.leaseLost) == 1 })
	waitFor(t, 5*time.Second, "late completion fenced", func() bool { return testutil.ToFloat64(p.metrics.fenced) == 1 })
	if r := b.row(t, "e-1"); r.Status != "processing" {
		t.Fatalf("fenced worker changed the row to %s", r.Status)
	}
}
