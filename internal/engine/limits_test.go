package engine

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/inboxd/inboxd/handlers"
)

// concurrency tracks how many handlers run at once.
type concurrency struct {
	mu       sync.Mutex
	now, max int
}

func (c *concurrency) enter() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now++
	c.max = max(c.max, c.now)
}

func (c *concurrency) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now--
}

func (c *concurrency) peak() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.max
}

// Reproduction from the bug report: the pool was workers/4 + 8 connections
// and every running transactional handler held one, so 64 slow handlers left
// none for claims, completions, renewals or ingest. Here the engine has 3
// connections and the handlers 2 of their own: 6 handlers spending 2s each
// in their transactions (three leases) queue for theirs, while every lease
// is kept and a plain row is processed at once.
func TestTxHandlersCannotStarveTheEngine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.createEffects(t)
	var inTx concurrency
	if err := b.reg.HandleTx("tx.slow", handlers.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
		inTx.enter()
		defer inTx.leave()
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, ev.EventID, ev.Attempt); err != nil {
			return err
		}
		return handlerSleep(ctx, 2*time.Second)
	})); err != nil {
		t.Fatal(err)
	}
	plainDone := make(chan time.Time, 1)
	if err := b.reg.HandleFunc("plain.fast", func(context.Context, *handlers.Event) error {
		plainDone <- time.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	engine := poolOf(t, b.db.URL, 3)
	txdb := poolOf(t, b.db.URL, 2)
	cfg := testConfig()
	cfg.Workers = 8
	cfg.Lease = 700 * time.Millisecond
	cfg.TxDB = txdb
	p, err := New(engine, b.reg, cfg, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := runPool(t, p)
	txIDs := ids("tx", 6)
	b.insert(t, "tx.slow", txIDs...)
	waitFor(t, 10*time.Second, "handlers holding every handler connection", func() bool { return inTx.peak() == 2 })

	inserted := time.Now()
	b.insert(t, "plain.fast", "p-1")
	select {
	case at := <-plainDone:
		if d := at.Sub(inserted); d > 2*time.Second {
			t.Errorf("plain row handled %s after insert while transactional handlers ran", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("plain row not handled: the engine is starved")
	}
	// The engine's own statements still get a connection at once.
	pingCtx, cancel := context.WithTimeout(ctx, time.Second)
	err = engine.Ping(pingCtx)
	cancel()
	if err != nil {
		t.Errorf("engine pool ping while handlers hold their connections: %v", err)
	}

	waitFor(t, 30*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == 7 })
	for id, n := range b.effectCounts(t) {
		if n != 1 {
			t.Errorf("event %s: %d transactional effects, want 1", id, n)
		}
	}
	if got := inTx.peak(); got > 2 {
		t.Errorf("%d transactional handlers ran at once on a 2-connection pool", got)
	}
	if n := testutil.ToFloat64(r.metrics.leaseLost) + testutil.ToFloat64(r.metrics.maintenance.Rescued.WithLabelValues("received")); n != 0 {
		t.Errorf("%v leases lost or rescued while handlers waited for connections", n)
	}
}

// Claims are bounded in bytes as well as rows: with a budget of 3 MiB (and
// the rows' empty headers, "{}", which count too) and 1 MiB payloads, no
// more than three rows are held at once, whatever the number of workers;
// the rows still all get processed.
func TestClaimsAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var running concurrency
	release := make(chan struct{})
	if err := b.reg.HandleFunc("big", func(ctx context.Context, ev *handlers.Event) error {
		running.enter()
		defer running.leave()
		if len(ev.Payload) != 1<<20 {
			t.Errorf("payload of %d bytes, want 1 MiB", len(ev.Payload))
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("x"), 1<<20)
	for _, id := range ids("big", 10) {
		if _, err := b.db.Pool.Exec(ctx,
			`INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('test', $1, 'big', $2)`, id, payload); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig()
	cfg.Workers = 8
	cfg.ClaimBytes = 3<<20 + 3*int64(len("{}"))
	p := b.start(t, cfg)
	waitFor(t, 10*time.Second, "three handlers running", func() bool { return running.peak() == 3 })
	// Nothing more is claimed while the budget is spent.
	if held := testutil.ToFloat64(p.metrics.heldBytes); held > float64(cfg.ClaimBytes) {
		t.Errorf("held %v bytes, budget 3 MiB", held)
	}
	if n := b.countStatus(t, "processing"); n != 3 {
		t.Errorf("%d rows claimed, want 3 (3 MiB of 1 MiB rows)", n)
	}
	close(release)
	waitFor(t, 30*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == 10 })
	if got := running.peak(); got != 3 {
		t.Errorf("peak handlers = %d, want 3", got)
	}
}

// Reproduction from the reliability report: with INBOXD_CLAIM_BYTES=1MiB,
// 20 rows of 40 payload bytes and 10 MiB of headers were held at once, and
// inboxd_worker_held_bytes read a few hundred bytes: only payloads and keys
// were counted. A row weighs its headers too: with 400 KB of headers each,
// two rows fit in 1 MiB, and the gauge shows their weight.
func TestClaimsCountHeadersInTheirBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var running concurrency
	release := make(chan struct{})
	if err := b.reg.HandleFunc("headers", func(ctx context.Context, ev *handlers.Event) error {
		running.enter()
		defer running.leave()
		if len(ev.Headers["trace"]) != 400_000 {
			t.Errorf("trace header of %d bytes, want 400,000", len(ev.Headers["trace"]))
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, payload, headers)
		SELECT 'test', 'h' || g, 'headers', convert_to(repeat('p', 40), 'UTF8'),
		       jsonb_build_object('trace', repeat('t', 400000))
		FROM generate_series(1, 20) AS g`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Workers = 8
	cfg.ClaimBytes = 1 << 20
	p := b.start(t, cfg)
	waitFor(t, 10*time.Second, "two handlers running", func() bool { return running.peak() >= 2 })
	if n := b.countStatus(t, "processing"); n != 2 {
		t.Errorf("%d rows claimed, want 2 (1 MiB of rows of 400 KB of headers)", n)
	}
	if held := testutil.ToFloat64(p.metrics.heldBytes); held < 800_000 || held > 1<<20 {
		t.Errorf("inboxd_worker_held_bytes = %v, want the two rows' weight (800 KB and more, at most 1 MiB)", held)
	}
	close(release)
	waitFor(t, 30*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == 20 })
	if got := running.peak(); got != 2 {
		t.Errorf("peak handlers = %d, want 2", got)
	}
}

// Reproduction from the bug report: a row inserted by SQL with attempts =
// 2147483647 made every claim fail with "integer out of range", and, being
// the oldest due row, stopped all processing. The schema bounds attempts,
// and a row at the bound is claimed and handled like any other.
func TestAttemptsAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx,
		`INSERT INTO inbox (source, event_id, event_type, attempts) VALUES ('test', 'max', 'x', 2147483647)`)
	var pgErr *pgconn.PgError
	if !errorsAs(err, &pgErr) || pgErr.Code != "23514" {
		t.Fatalf("insert with attempts = 2147483647: %v, want a check violation", err)
	}
	if _, err := b.db.Pool.Exec(ctx,
		`INSERT INTO inbox (source, event_id, event_type, attempts) VALUES ('test', 'bound', 'x', 1000000)`); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "x", ids("e", 5)...)
	var calls callCounter
	if err := b.reg.HandleFunc("x", func(_ context.Context, ev *handlers.Event) error {
		calls.add(ev.EventID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.start(t, testConfig())
	waitFor(t, 10*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == 6 })
	if r := b.row(t, "bound"); r.Attempts != 1000000 {
		t.Errorf("attempts of the row at the bound = %d, want it to stay at 1000000", r.Attempts)
	}
}

// A claim that fails because of one row's data must not stop the others.
// A trigger makes claiming one row fail with a data exception, as a broken
// value would: the row is found, dead-lettered with the reason, and every
// other row is processed.
func TestPoisonRowIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `
		CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'value out of range for this row' USING ERRCODE = '22003'; END $$;
		CREATE TRIGGER poison BEFORE UPDATE ON inbox FOR EACH ROW
			WHEN (OLD.event_id = 'poison' AND NEW.status = 'processing')
			EXECUTE FUNCTION poison();`); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "x", "poison") // oldest: every batch claim includes it
	b.insert(t, "x", ids("e", 30)...)
	if err := b.reg.HandleFunc("x", func(context.Context, *handlers.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p := b.start(t, testConfig())
	waitFor(t, 20*time.Second, "every other row processed", func() bool { return b.countStatus(t, "processed") == 30 })
	waitFor(t, 5*time.Second, "poison row dead-lettered", func() bool { return b.row(t, "poison").Status == "dead" })
	if r := b.row(t, "poison"); !strings.Contains(errString(r.LastError), "value out of range for this row") {
		t.Errorf("poison row last_error = %q, want the database's reason", errString(r.LastError))
	}
	if n := testutil.ToFloat64(p.metrics.poisoned); n != 1 {
		t.Errorf("poisoned rows = %v, want 1", n)
	}
}

// A row that can be neither claimed nor dead-lettered is skipped, and the
// others still flow.
func TestUnmovablePoisonRowIsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `
		CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'corrupt' USING ERRCODE = '22P05'; END $$;
		CREATE TRIGGER poison BEFORE UPDATE ON inbox FOR EACH ROW
			WHEN (OLD.event_id = 'poison') EXECUTE FUNCTION poison();`); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "x", "poison")
	b.insert(t, "x", ids("e", 30)...)
	if err := b.reg.HandleFunc("x", func(context.Context, *handlers.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	b.start(t, testConfig())
	waitFor(t, 20*time.Second, "every other row processed", func() bool { return b.countStatus(t, "processed") == 30 })
	if r := b.row(t, "poison"); r.Status != "received" {
		t.Errorf("unmovable row = %s, want left received", r.Status)
	}
}

// The window between a handler's success and its outcome's commit (what a
// crash re-delivers) is measured for every row.
func TestOutcomeWriteDelayIsMeasured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.reg.HandleFunc("x", func(context.Context, *handlers.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.reg.HandleTx("tx", handlers.TxHandlerFunc(func(context.Context, pgx.Tx, *handlers.Event) error { return nil })); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "x", ids("e", 40)...)
	b.insert(t, "tx", ids("t", 10)...)
	p := b.start(t, testConfig())
	waitFor(t, 10*time.Second, "every row processed", func() bool { return b.countStatus(t, "processed") == 50 })
	// A row reads processed once its outcome commits; the delay is observed
	// just after. Stopping the pool waits for those observations.
	p.stop(t)
	var m dto.Metric
	if err := p.metrics.outcomeWriteDelay.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram().GetSampleCount(); got != 50 {
		t.Errorf("outcome write delay observed %d times, want once per row (50)", got)
	}
	if sum := m.GetHistogram().GetSampleSum(); sum <= 0 {
		t.Errorf("outcome write delay sum = %v, want positive", sum)
	}
}

// poolOf opens a pgx pool of n connections on dbURL, closed with the test.
func poolOf(t *testing.T, dbURL string, n int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = n
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
