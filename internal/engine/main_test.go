package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/testkit"
	"github.com/inboxd/inboxd/worker"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperProcess())
	}
	if os.Getenv(crashHelperEnv) != "" {
		os.Exit(runCrashHelper())
	}
	goleak.VerifyTestMain(m)
}

// bundle is what setup gives a test: its own database and a registry.
type bundle struct {
	db  *pgtest.DB
	reg *handlers.Registry
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{db: pgtest.New(t), reg: handlers.NewRegistry()}
}

// testConfig returns a config with short intervals suited to tests.
func testConfig() worker.Config {
	return worker.Config{
		Workers:         4,
		ClaimBatch:      100,
		MaxAttempts:     3,
		Lease:           5 * time.Second,
		RetryPolicy:     worker.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		PollInterval:    50 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
	}
}

// runningPool is a Pool running in the background.
type runningPool struct {
	*Pool
	cancel  context.CancelFunc
	stopped chan struct{} // closed when Run returned
	err     error         // Run's result, once stopped is closed
}

// wait waits up to timeout for Run to return and reports whether it did.
func (r *runningPool) wait(timeout time.Duration) bool {
	select {
	case <-r.stopped:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stop cancels the pool and waits for Run to return.
func (r *runningPool) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	if !r.wait(30 * time.Second) {
		t.Errorf("pool did not stop within 30s")
		return
	}
	if r.err != nil {
		t.Errorf("Run returned %v", r.err)
	}
}

// start runs a pool on its own connection pool (as a separate replica
// would) until the test ends.
func (b *bundle) start(t *testing.T, cfg worker.Config) *runningPool {
	t.Helper()
	return b.startOn(t, b.db.URL, cfg)
}

// startOn is start through the database URL dbURL (a proxy, say).
func (b *bundle) startOn(t *testing.T, dbURL string, cfg worker.Config) *runningPool {
	t.Helper()
	dbPool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(dbPool, b.reg, cfg, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dbPool.Close) // after the pool stopped: cleanups run last-in first-out
	return runPool(t, p)
}

// runPool runs p in the background until the test ends, and waits until it
// is ready.
func runPool(t *testing.T, p *Pool) *runningPool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningPool{Pool: p, cancel: cancel, stopped: make(chan struct{})}
	go func() { r.err = startstop.Run(ctx, p); close(r.stopped) }()
	t.Cleanup(func() { r.stop(t) })
	select {
	case <-p.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("pool not ready")
	}
	return r
}

// newTestPool returns a Pool on the test's database that is not running, for
// tests that call its statements directly.
func newTestPool(t *testing.T, b *bundle) *Pool {
	t.Helper()
	p, err := New(b.db.Pool, b.reg, testConfig(), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testLogger(t testing.TB) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	return zerolog.Nop()
}

// insert adds rows of one event type the way any service may: with plain
// SQL and only the contract's minimal columns.
func (b *bundle) insert(t testing.TB, eventType string, ids ...string) {
	t.Helper()
	sources := make([]string, len(ids))
	types := make([]string, len(ids))
	payloads := make([][]byte, len(ids))
	for i, id := range ids {
		sources[i], types[i], payloads[i] = "test", eventType, []byte(`{"id":"`+id+`"}`)
	}
	_, err := b.db.Pool.Exec(context.Background(),
		`INSERT INTO inbox (source, event_id, event_type, payload)
		 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])`,
		sources, ids, types, payloads)
	if err != nil {
		t.Fatalf("insert rows: %v", err)
	}
}

// row is a row's state as tests inspect it.
type row struct {
	Status      string
	Attempts    int
	LastError   *string
	LeaseToken  *int64
	AvailableAt time.Time
	UpdatedAt   time.Time
	ProcessedAt *time.Time
}

func (b *bundle) row(t testing.TB, eventID string) row {
	t.Helper()
	var r row
	err := b.db.Pool.QueryRow(context.Background(),
		`SELECT status, attempts, last_error, lease_token, available_at, updated_at, processed_at
		 FROM inbox WHERE source = 'test' AND event_id = $1`, eventID).
		Scan(&r.Status, &r.Attempts, &r.LastError, &r.LeaseToken, &r.AvailableAt, &r.UpdatedAt, &r.ProcessedAt)
	if err != nil {
		t.Fatalf("read row %s: %v", eventID, err)
	}
	return r
}

func (b *bundle) countStatus(t testing.TB, status string) int {
	t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM inbox WHERE status = $1`, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond until it holds or the timeout passes.
var waitFor = testkit.WaitFor

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func errString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// countLike is the number of rows whose event id is LIKE pattern.
func (b *bundle) countLike(t *testing.T, pattern string) int {
	t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE event_id LIKE $1`, pattern).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
