package inboxd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/ingest/kafka"
	"github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/worker"
)

// testConfig is a Config on db with short intervals suited to tests and a
// shutdown budget longer than any test waits, so that a handler finishing
// at a stop is the stop's doing, not the budget's.
func testConfig(db *pgxpool.Pool, reg *handlers.Registry, log zerolog.Logger) inboxd.Config {
	return inboxd.Config{
		Registry:   reg,
		DB:         db,
		Logger:     log,
		Registerer: prometheus.NewRegistry(),
		Worker: worker.Config{
			Workers:         4,
			MaxAttempts:     3,
			Lease:           5 * time.Second,
			RetryPolicy:     worker.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond},
			PollInterval:    50 * time.Millisecond,
			ShutdownTimeout: time.Minute,
		},
	}
}

// running is an Inboxd whose Run runs in the background.
type running struct {
	*inboxd.Inboxd
	done chan struct{} // closed when Run returned
	err  error         // Run's result, once done is closed
}

// start runs ib until the test ends (or it is stopped) and waits until it
// runs.
func start(t *testing.T, ib *inboxd.Inboxd) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Inboxd: ib, done: make(chan struct{})}
	go func() { r.err = ib.Run(ctx); close(r.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Error("Run did not return within a minute of its context's end")
		}
	})
	select {
	case <-ib.Running():
	case <-r.done:
		t.Fatalf("Run returned before running: %v", r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("not running after 30s")
	}
	return r
}

// returned waits for Run to return and gives its result.
func (r *running) returned(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute")
		return nil
	}
}

func insert(t *testing.T, db *pgxpool.Pool, eventType, eventID string) {
	t.Helper()
	_, err := db.Exec(context.Background(),
		`INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('test', $1, $2, '{}')`, eventID, eventType)
	if err != nil {
		t.Fatalf("insert %s: %v", eventID, err)
	}
}

// rowState is a row's status and attempts.
func rowState(t *testing.T, db *pgxpool.Pool, eventID string) (status string, attempts int) {
	t.Helper()
	err := db.QueryRow(context.Background(),
		`SELECT status, attempts FROM inbox WHERE source = 'test' AND event_id = $1`, eventID).Scan(&status, &attempts)
	if err != nil {
		t.Fatalf("read row %s: %v", eventID, err)
	}
	return status, attempts
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func TestNewRefusesABadConfig(t *testing.T) {
	// The pool does not connect until used: New reaches no database.
	db, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reg := handlers.NewRegistry()
	for _, tt := range []struct {
		name string
		cfg  inboxd.Config
		want []string // one line each
	}{
		{"empty", inboxd.Config{}, []string{"Config.Registry is nil", "Config.DB is nil"}},
		{"tx pool in the worker's config", inboxd.Config{Registry: reg, DB: db, Worker: worker.Config{TxDB: db}},
			[]string{"give the handlers' pool as Config.TxDB"}},
		{"every part's settings", inboxd.Config{Registry: reg, DB: db,
			Worker:    worker.Config{Workers: -1, MaxAttempts: -2},
			Retention: worker.RetentionConfig{Processed: -time.Hour},
			Sources:   []source.Source{kafka.New(kafka.Config{})}},
			[]string{"workers must be between 1 and 10000, got -1", "max attempts must be between 1 and",
				"processed retention must be at least 1s, got -1h0m0s", "ingest: no Kafka brokers"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ib, err := inboxd.New(tt.cfg)
			if err == nil || ib != nil {
				t.Fatalf("New = %v, %v; want an error", ib, err)
			}
			lines := strings.Split(err.Error(), "\n")
			for _, w := range tt.want {
				n := 0
				for _, l := range lines {
					if strings.Contains(l, w) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%d lines of the error say %q, want one:\n%v", n, w, err)
				}
			}
		})
	}

	// A valid Config registers its metrics once: the dry run registers none.
	metrics := prometheus.NewRegistry()
	if _, err := inboxd.New(inboxd.Config{Registry: reg, DB: db, Registerer: metrics}); err != nil {
		t.Fatalf("New with a valid Config: %v", err)
	}
}

func TestRunProcessesRows(t *testing.T) {
	db := pgtest.New(t)
	reg := handlers.NewRegistry()
	handled := make(chan string, 10)
	if err := reg.HandleFunc("greeting", func(_ context.Context, ev *handlers.Event) error {
		handled <- ev.EventID
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ib, err := inboxd.New(testConfig(db.Pool, reg, zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, ib)
	if err := r.Ready(context.Background()); err != nil {
		t.Errorf("Ready while running = %v, want nil", err)
	}
	if err := r.Healthy(); err != nil {
		t.Errorf("Healthy without ingest = %v, want nil", err)
	}
	for i := range 3 {
		insert(t, db.Pool, "greeting", fmt.Sprintf("e%d", i))
	}
	for range 3 {
		receive(t, handled, "a handled row")
	}
	waitFor(t, 30*time.Second, "three processed rows", func() bool {
		for i := range 3 {
			if s, _ := rowState(t, db.Pool, fmt.Sprintf("e%d", i)); s != "processed" {
				return false
			}
		}
		return true
	})
	if err := r.Stop(context.Background()); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if err := r.returned(t); err != nil {
		t.Errorf("Run = %v, want nil after Stop", err)
	}
	if err := r.Ready(context.Background()); err == nil || err.Error() != "stopped" {
		t.Errorf("Ready after Run returned = %v, want stopped", err)
	}
}

func TestReadyBeforeRun(t *testing.T) {
	db := pgtest.New(t)
	ib, err := inboxd.New(testConfig(db.Pool, handlers.NewRegistry(), zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Ready(context.Background()); err == nil || err.Error() != "starting" {
		t.Errorf("Ready before Run = %v, want starting", err)
	}
}

// blocking registers a handler for "slow" that says when it starts and
// returns when released (nil) or when its context ends (the cause).
func blocking(t *testing.T) (reg *handlers.Registry, started chan string, release chan struct{}, ended chan error) {
	t.Helper()
	reg = handlers.NewRegistry()
	started, release, ended = make(chan string, 1), make(chan struct{}), make(chan error, 1)
	err := reg.HandleFunc("slow", func(ctx context.Context, ev *handlers.Event) error {
		started <- ev.EventID
		select {
		case <-release:
			ended <- nil
			return nil
		case <-ctx.Done():
			ended <- context.Cause(ctx)
			return fmt.Errorf("slow: %w", context.Cause(ctx))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg, started, release, ended
}

func TestStopLetsARunningHandlerFinish(t *testing.T) {
	db := pgtest.New(t)
	reg, started, release, ended := blocking(t)
	var logs syncbuf.Buffer
	ib, err := inboxd.New(testConfig(db.Pool, reg, zerolog.New(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, ib)
	insert(t, db.Pool, "slow", "s1")
	receive(t, started, "the handler to start")

	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background()) }()
	waitFor(t, 30*time.Second, "the workers to stop claiming", func() bool {
		return strings.Contains(logs.String(), "stopping: no new claims")
	})
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v while a handler runs", err)
	case <-r.done:
		t.Fatalf("Run returned %v while a handler runs", r.err)
	default:
	}
	close(release)
	if err := receive(t, ended, "the handler to return"); err != nil {
		t.Errorf("the handler's context ended (%v): Stop must let it finish", err)
	}
	if err := receive(t, stopped, "Stop to return"); err != nil {
		t.Errorf("Stop = %v, want nil", err)
	}
	if err := r.returned(t); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if s, n := rowState(t, db.Pool, "s1"); s != "processed" || n != 1 {
		t.Errorf("row after Stop: %s after %d attempts, want processed after 1", s, n)
	}
}

func TestStopAndCancelCancelsARunningHandler(t *testing.T) {
	db := pgtest.New(t)
	reg, started, _, ended := blocking(t)
	ib, err := inboxd.New(testConfig(db.Pool, reg, zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, ib)
	insert(t, db.Pool, "slow", "c1")
	receive(t, started, "the handler to start")

	// The shutdown budget is a minute: StopAndCancel returning sooner
	// means it cancelled the handler itself.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.StopAndCancel(ctx); err != nil {
		t.Fatalf("StopAndCancel = %v, want nil", err)
	}
	if err := receive(t, ended, "the handler to return"); !errors.Is(err, inboxd.ErrStopAndCancel) {
		t.Errorf("the handler's context ended with %v, want ErrStopAndCancel", err)
	}
	if err := r.returned(t); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if s, n := rowState(t, db.Pool, "c1"); s != "received" || n != 0 {
		t.Errorf("row after StopAndCancel: %s after %d attempts, want received (released, its attempt not counted)", s, n)
	}

	// Not lost: another engine on the same inbox handles it.
	done := make(chan string, 1)
	reg2 := handlers.NewRegistry()
	if err := reg2.HandleFunc("slow", func(_ context.Context, ev *handlers.Event) error {
		done <- ev.EventID
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ib2, err := inboxd.New(testConfig(db.Pool, reg2, zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	start(t, ib2)
	if id := receive(t, done, "the row's retry"); id != "c1" {
		t.Errorf("retried %q, want c1", id)
	}
	waitFor(t, 30*time.Second, "the row processed", func() bool {
		s, _ := rowState(t, db.Pool, "c1")
		return s == "processed"
	})
}

func TestRunRunsOnce(t *testing.T) {
	db := pgtest.New(t)
	reg := handlers.NewRegistry()

	ib, err := inboxd.New(testConfig(db.Pool, reg, zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, ib)
	if err := ib.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "Run called twice") {
		t.Errorf("second Run = %v, want a refusal", err)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if err := r.returned(t); err != nil {
		t.Errorf("first Run = %v, want nil", err)
	}
	if err := ib.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "Run called twice") {
		t.Errorf("Run after it returned = %v, want a refusal", err)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Errorf("second Stop = %v, want nil", err)
	}

	stoppedFirst, err := inboxd.New(testConfig(db.Pool, reg, zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	if err := stoppedFirst.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Run = %v, want nil", err)
	}
	if err := stoppedFirst.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "Run called after Stop") {
		t.Errorf("Run after Stop = %v, want a refusal", err)
	}
}

func TestRunRefusesAnOlderSchema(t *testing.T) {
	db := pgtest.NewEmpty(t, false)
	ib, err := inboxd.New(testConfig(db.Pool, handlers.NewRegistry(), zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ib.Run(ctx); err == nil {
		t.Fatal("Run on a database without the schema = nil, want an error")
	}

	cfg := testConfig(db.Pool, handlers.NewRegistry(), zerolog.Nop())
	cfg.Migrate = true
	migrating, err := inboxd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start(t, migrating) // runs: the schema was migrated first
}
