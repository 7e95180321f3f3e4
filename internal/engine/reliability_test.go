package engine

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/netfault"
	"github.com/inboxd/inboxd/worker"
)

// callCounter counts handler calls per event id.
type callCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *callCounter) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = make(map[string]int)
	}
	c.calls[id]++
}

func (c *callCounter) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

// dropRenewals makes the database drop lease renewals silently, as lost
// packets would: a trigger (named drop_renewals) discards every update
// that keeps a row processing, for the rows where the SQL condition also
// holds (on OLD; "true" for every row).
func (b *bundle) dropRenewals(t *testing.T, also string) {
	t.Helper()
	if _, err := b.db.Pool.Exec(context.Background(), `
		CREATE FUNCTION drop_renewals() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RETURN NULL; END $$;
		CREATE TRIGGER drop_renewals BEFORE UPDATE ON inbox FOR EACH ROW
			WHEN (OLD.status = 'processing' AND NEW.status = 'processing' AND (`+also+`))
			EXECUTE FUNCTION drop_renewals();`); err != nil {
		t.Fatal(err)
	}
}

// createEffects creates a table without a unique constraint in which
// transactional handlers record what they did: a duplicate effect shows up
// as a second row.
func (b *bundle) createEffects(t *testing.T) {
	t.Helper()
	if _, err := b.db.Pool.Exec(context.Background(),
		`CREATE TABLE effects (event_id text NOT NULL, attempt int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) effectCounts(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT event_id, count(*) FROM effects GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int)
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// handlerSleep waits d or until ctx ends, as a well-behaved handler does.
func handlerSleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Reproduction (scaled from the bug report: lease 2s, 4 workers,
// MAX_ATTEMPTS=3, each transactional handler spending 1s in its
// transaction): slow transactional handlers must not stop lease renewal, so
// no row is rescued, none goes dead without running, every transactional
// effect is written exactly once and every plain handler runs once.
func TestSlowTxHandlersKeepTheirLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createEffects(t)
	if err := b.reg.HandleTx("tx.slow", handlers.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, ev.EventID, ev.Attempt); err != nil {
			return err
		}
		return handlerSleep(ctx, time.Second)
	})); err != nil {
		t.Fatal(err)
	}
	var plain callCounter
	if err := b.reg.HandleFunc("plain.slow", func(ctx context.Context, ev *handlers.Event) error {
		plain.add(ev.EventID)
		return handlerSleep(ctx, 500*time.Millisecond)
	}); err != nil {
		t.Fatal(err)
	}
	txIDs, plainIDs := ids("tx", 24), ids("plain", 8)
	b.insert(t, "tx.slow", txIDs...)
	b.insert(t, "plain.slow", plainIDs...)
	cfg := testConfig()
	cfg.Lease = 2 * time.Second
	p := b.start(t, cfg)

	waitFor(t, 90*time.Second, "every row finished", func() bool {
		return b.countStatus(t, "processed")+b.countStatus(t, "dead") == len(txIDs)+len(plainIDs)
	})
	if n := b.countStatus(t, "dead"); n != 0 {
		t.Errorf("%d rows went dead", n)
	}
	effects := b.effectCounts(t)
	for _, id := range txIDs {
		if effects[id] != 1 {
			t.Errorf("event %s: %d transactional effects, want exactly 1", id, effects[id])
		}
	}
	for _, id := range plainIDs {
		if n := plain.get(id); n != 1 {
			t.Errorf("event %s: plain handler ran %d times, want 1", id, n)
		}
	}
	for _, status := range []string{"received", "dead"} {
		if n := testutil.ToFloat64(p.metrics.maintenance.Rescued.WithLabelValues(status)); n != 0 {
			t.Errorf("%v rows rescued to %s: a live worker lost its lease", n, status)
		}
	}
	if testutil.ToFloat64(p.metrics.renewals) == 0 {
		t.Error("no lease was renewed, yet rows waited longer than a lease")
	}
}

// A row whose lease expired before its handler started must not lose an
// attempt for it. With MaxAttempts 1, losing one sends the row dead without
// its handler ever running.
func TestLeaseExpiredBeforeStartCostsNoAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var calls callCounter
	release := make(chan struct{})
	if err := b.reg.HandleFunc("x", func(ctx context.Context, ev *handlers.Event) error {
		calls.add(ev.EventID)
		if ev.EventID == "e-00000" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	all := ids("e", 4)
	b.insert(t, "x", all[0])
	cfg := testConfig()
	cfg.Workers, cfg.Prefetch, cfg.MaxAttempts = 1, 4, 1
	cfg.Lease = time.Second
	p := b.start(t, cfg)
	waitFor(t, 10*time.Second, "first row running", func() bool { return calls.get(all[0]) == 1 })
	b.insert(t, "x", all[1:]...)
	waitFor(t, 10*time.Second, "three rows waiting in the prefetch queue", func() bool {
		return b.countStatus(t, "processing") == 4
	})

	// From now on renewals of the three waiting rows are lost: their
	// leases expire and this pool's own rescuer returns them.
	b.dropRenewals(t, "OLD.event_id <> 'e-00000'")
	waitFor(t, 15*time.Second, "the waiting rows rescued", func() bool {
		return testutil.ToFloat64(p.metrics.maintenance.Rescued.WithLabelValues("received"))+
			testutil.ToFloat64(p.metrics.maintenance.Rescued.WithLabelValues("dead")) == 3
	})
	// Rescued, their attempt refunded; the pool may have claimed them again
	// already (one attempt, the new claim's).
	for _, id := range all[1:] {
		if r := b.row(t, id); r.Status == "dead" || r.Attempts > 1 {
			t.Errorf("rescued row %s = %s with %d attempts: the attempt it never ran was counted", id, r.Status, r.Attempts)
		}
	}
	if _, err := b.db.Pool.Exec(ctx, `DROP TRIGGER drop_renewals ON inbox`); err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFor(t, 20*time.Second, "every row finished", func() bool {
		return b.countStatus(t, "processed")+b.countStatus(t, "dead") == len(all)
	})
	for _, id := range all {
		r := b.row(t, id)
		if r.Status != "processed" || r.Attempts != 1 {
			t.Errorf("row %s = %s after %d attempts (last_error %q), want processed on attempt 1",
				id, r.Status, r.Attempts, errString(r.LastError))
		}
		if n := calls.get(id); n != 1 {
			t.Errorf("row %s handled %d times, want 1", id, n)
		}
	}
}

// A finished row keeps its lease until its outcome is written: a database
// stall on completions longer than the lease must not let the row be
// rescued and its (successful) handler run again.
func TestFinishedRowKeepsLeaseUntilOutcomeWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Completions to processed fail while stall.on is true; lease renewals,
	// which do not change the status, still succeed.
	if _, err := b.db.Pool.Exec(ctx, `
		CREATE TABLE stall (on_ boolean NOT NULL);
		INSERT INTO stall VALUES (true);
		CREATE FUNCTION stall_completions() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT on_ FROM stall) THEN
				RAISE EXCEPTION 'completions stalled by the test';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER stall_completions BEFORE UPDATE ON inbox FOR EACH ROW
			WHEN (OLD.status = 'processing' AND NEW.status = 'processed')
			EXECUTE FUNCTION stall_completions();`); err != nil {
		t.Fatal(err)
	}
	var calls callCounter
	if err := b.reg.HandleFunc("x", func(_ context.Context, ev *handlers.Event) error {
		calls.add(ev.EventID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Lease = 600 * time.Millisecond
	p := b.start(t, cfg)
	b.insert(t, "x", "e-1")
	waitFor(t, 10*time.Second, "handler ran", func() bool { return calls.get("e-1") == 1 })
	waitFor(t, 10*time.Second, "a completion failed", func() bool {
		return testutil.ToFloat64(p.metrics.dbErrors.WithLabelValues("complete")) > 0
	})
	time.Sleep(5 * cfg.Lease) // the stall must outlast several leases: this is the fault, not a wait for a result
	if _, err := b.db.Pool.Exec(ctx, `UPDATE stall SET on_ = false`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "row processed", func() bool { return b.row(t, "e-1").Status == "processed" })
	if n := calls.get("e-1"); n != 1 {
		t.Fatalf("handler ran %d times: the finished row lost its lease while its outcome waited", n)
	}
	if r := b.row(t, "e-1"); r.Attempts != 1 {
		t.Fatalf("attempts = %d, want 1", r.Attempts)
	}
}

// Statement timeouts follow the database, not the lease. Reproduction from
// the bug report: with a 3s lease and 800ms of added latency to PostgreSQL,
// 0 of 600 rows were processed in 180s (claims timed out at Lease/2, each
// timeout closed the connection, and a new one needed even more round trips).
func TestClaimsSurviveDatabaseLatency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := newProxy(t, b.db.URL)
	if err := proxy.Latency(800 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var calls callCounter
	if err := b.reg.HandleFunc("x", func(_ context.Context, ev *handlers.Event) error {
		calls.add(ev.EventID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	all := ids("e", 20)
	b.insert(t, "x", all...)
	cfg := testConfig()
	cfg.Lease = 3 * time.Second
	b.startOn(t, proxyURL(t, proxy, b.db.URL), cfg)
	waitFor(t, 90*time.Second, "every row processed through the slow link", func() bool {
		return b.countStatus(t, "processed") == len(all)
	})
}

// Shutdown is bounded whatever the database does: with PostgreSQL
// unreachable and handlers finishing after the stop, Run returns within
// ShutdownTimeout plus the documented margin.
func TestShutdownWithDatabaseDownIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := newProxy(t, b.db.URL)
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	if err := b.reg.HandleFunc("x", func(context.Context, *handlers.Event) error {
		entered <- struct{}{}
		<-release
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "x", ids("e", 8)...)
	cfg := testConfig()
	cfg.ShutdownTimeout = time.Second
	p := b.startOn(t, proxyURL(t, proxy, b.db.URL), cfg)
	for range 4 {
		<-entered
	}
	proxy.Cut() // PostgreSQL is gone: every statement fails from now on
	start := time.Now()
	p.cancel()
	close(release) // the handlers succeed, but their outcomes cannot be written
	if !p.wait(cfg.ShutdownTimeout + worker.ShutdownMargin - worker.ShutdownReserve/2) {
		t.Fatalf("Run still running %s after the stop; want at most ShutdownTimeout + %s - %s", time.Since(start).Round(time.Millisecond), worker.ShutdownMargin, worker.ShutdownReserve)
	}
	t.Logf("stopped in %s with the database unreachable", time.Since(start).Round(time.Millisecond))
}

// newProxy puts a TCP proxy between the test and the database server.
func newProxy(t *testing.T, dbURL string) *netfault.Proxy {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := netfault.New(cfg.ConnConfig.Host + ":" + strconv.Itoa(int(cfg.ConnConfig.Port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func proxyURL(t *testing.T, p *netfault.Proxy, dbURL string) string {
	t.Helper()
	u, err := p.Rewrite(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
