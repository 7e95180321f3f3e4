package maintenance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/startstop/startstoptest"

	"github.com/inboxd/inboxd/worker"
)

// within fails the test unless ch delivers within a generous deadline.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// A periodic service runs a round at Start and one every interval; Stop
// is a no-op before Start, ends the round in progress through its context
// and returns once it has, and may be called twice; a second Start fails;
// the end of Start's context ends the loop as Stop does.
func TestPeriodicServiceContract(t *testing.T) {
	t.Parallel()
	began := make(chan struct{})
	var ended atomic.Int32
	block := atomic.Bool{}
	s := &periodic{interval: time.Millisecond, round: func(ctx context.Context) {
		// Whether to block is decided before the round says it began: the
		// round the test was told of before it set block must not block.
		blocks := block.Load()
		began <- struct{}{}
		if blocks {
			<-ctx.Done()
		}
		ended.Add(1)
	}}
	s.Stop() // never started: a no-op
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
		t.Errorf("second Start = %v, want startstop.ErrStarted", err)
	}
	for i := range 3 {
		within(t, began, fmt.Sprintf("round %d", i+1))
	}
	block.Store(true)
	within(t, began, "a round that blocks until its context ends")
	before := ended.Load()
	s.Stop()
	if ended.Load() <= before {
		t.Error("Stop returned before the round in progress did")
	}
	s.Stop() // twice: a no-op

	ctx, cancel := context.WithCancel(context.Background())
	c := &periodic{interval: time.Hour, round: func(context.Context) { began <- struct{}{} }}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	within(t, began, "the round at Start")
	cancel()
	within(t, c.Stopped(), "the loop's end after its context's")
	c.Stop()
}

// The pool's maintenance starts its services together and stops them
// together; when one cannot start, those already started are stopped
// before Start returns its error.
func TestMaintenanceStartsAndStopsTogether(t *testing.T) {
	t.Parallel()
	began := make(chan string, 16)
	round := func(name string) func(context.Context) {
		return func(context.Context) { began <- name }
	}
	m := &Services{Rescuer: &Rescuer{}, Sweeper: &Sweeper{}, stats: &statsRefresher{}, rollup: &Rollup{tally: NewTally()}}
	m.Rescuer.periodic = periodic{interval: time.Hour, round: round("rescuer")}
	m.Sweeper.periodic = periodic{interval: time.Hour, round: round("sweeper")}
	m.stats.periodic = periodic{interval: time.Hour, round: round("stats")}
	m.rollup.periodic = periodic{interval: time.Hour, round: round("rollup")}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 4 {
		seen[within(t, began, "each service's first round")] = true
	}
	if len(seen) != 4 {
		t.Errorf("first rounds of %v, want the rescuer's, the sweeper's, the stats' and the rollup's", seen)
	}
	m.Stop()
	for _, s := range []*periodic{&m.Rescuer.periodic, &m.Sweeper.periodic, &m.stats.periodic, &m.rollup.periodic} {
		within(t, s.Stopped(), "a service's end")
	}

	// The stats refresher was started before: the others are stopped again.
	f := &Services{Rescuer: &Rescuer{}, Sweeper: &Sweeper{}, stats: &statsRefresher{}}
	f.Rescuer.periodic = periodic{interval: time.Hour, round: round("rescuer")}
	f.Sweeper.periodic = periodic{interval: time.Hour, round: round("sweeper")}
	f.stats.periodic = periodic{interval: time.Hour, round: round("stats")}
	if err := f.stats.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer f.stats.Stop()
	if err := f.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("Start with a service started before = %v, want startstop.ErrStarted", err)
	}
	for _, s := range []*periodic{&f.Rescuer.periodic, &f.Sweeper.periodic} {
		within(t, s.Stopped(), "a service started, then stopped on the failure")
	}
}

// fakeRoutes answers the maintenance services' questions about routes.
type fakeRoutes struct {
	maxTypes          []string
	maxValues         []int32
	delay             time.Duration
	skip              string // the type whose route skips dead rows
	ordered, blocking []string
}

func (f fakeRoutes) MaxAttemptsByType() ([]string, []int32) { return f.maxTypes, f.maxValues }
func (f fakeRoutes) RescueDelay(string, int) time.Duration  { return f.delay }
func (f fakeRoutes) SkipsDead(t string) bool                { return t == f.skip }
func (f fakeRoutes) OrderedTypes() ([]string, []string)     { return f.ordered, f.blocking }

// countingUnparker counts the unparks asked of it.
type countingUnparker struct{ n atomic.Int32 }

func (u *countingUnparker) Unpark(context.Context) (int, error) { u.n.Add(1); return 0, nil }

// maintenanceConfig is a worker.Config with its defaults and short
// intervals.
func maintenanceConfig() worker.Config {
	cfg := worker.Config{Lease: 5 * time.Second}.WithDefaults()
	cfg.RescueInterval, cfg.StatsInterval = 20*time.Millisecond, 20*time.Millisecond
	return cfg
}

// The rescuer runs alone, on what it is told of the routes: it returns
// expired rows (a started one delayed by its route's backoff, an unstarted
// one due at once with its attempt refunded, one out of its route's own
// attempts dead), counts them, wakes the claims, and asks for an unpark
// because a dead row's route skips dead rows.
func TestRescuerRunsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, attempts, started, lease_token, lease_expires_at, locked_by)
		VALUES ('test', 'dead', 'skip', 'processing', 2, true, 7, now() - interval '1 second', 'w'),
		       ('test', 'started', 'x', 'processing', 2, true, 7, now() - interval '1 second', 'w'),
		       ('test', 'queued', 'x', 'processing', 1, false, 7, now() - interval '1 second', 'w')`); err != nil {
		t.Fatal(err)
	}
	var woken atomic.Int32
	u := &countingUnparker{}
	m := testMetrics()
	routes := fakeRoutes{maxTypes: []string{"skip"}, maxValues: []int32{2}, delay: time.Hour, skip: "skip"}
	r := newRescuer(b.db.Pool, routes, u, func() { woken.Add(1) }, maintenanceConfig(), zerolog.Nop(), m)
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the expired rows rescued", func() bool { return b.count(t, `status = $1`, "processing") == 0 })
	r.Stop()

	if got := b.row(t, "dead"); got.Status != "dead" || got.Attempts != 2 {
		t.Errorf("row out of its route's attempts: %s after %d attempts, want dead after 2", got.Status, got.Attempts)
	}
	if got := b.row(t, "queued"); got.Status != "received" || got.Attempts != 0 {
		t.Errorf("unstarted row: %s after %d attempts, want received with its attempt refunded", got.Status, got.Attempts)
	}
	if got := b.row(t, "started"); got.Status != "received" || time.Until(got.AvailableAt) < 59*time.Minute {
		t.Errorf("started row: %s, due at %s; want received, due in an hour (its route's backoff)", got.Status, got.AvailableAt)
	}
	if n := u.n.Load(); n != 1 {
		t.Errorf("%d unparks asked, want 1 (a dead row on a route that skips them)", n)
	}
	if woken.Load() == 0 {
		t.Error("the claims were not woken for the rescued rows")
	}
	if d, rcv := testutil.ToFloat64(m.Rescued.WithLabelValues("dead")), testutil.ToFloat64(m.Rescued.WithLabelValues("received")); d != 1 || rcv != 2 {
		t.Errorf("rescued counters: dead %v, received %v; want 1 and 2", d, rcv)
	}
}

// The sweeper runs alone: it deletes a dead worker's start bits (not a
// recent claim's) and unparks the parked row that waits for nothing (not
// the one whose key is held), and wakes the claims.
func TestSweeperRunsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO inbox_starts (token, bits, version, updated_at)
		VALUES (1, '\x01', 1, now() - interval '1 hour'), (2, '\x01', 1, now())`); err != nil {
		t.Fatal(err)
	}
	b.insertKeyed(t, "ord", 1, 3)
	// The first row of the key is done; the second, parked, waits for
	// nothing; the third waits behind the second.
	if _, err := b.db.Pool.Exec(ctx, `UPDATE inbox SET available_at = '9999-12-31 00:00:00+00' WHERE event_id <> 'k0000:000';
		UPDATE inbox SET status = 'processed', processed_at = now() WHERE event_id = 'k0000:000'`); err != nil {
		t.Fatal(err)
	}
	var woken atomic.Int32
	s := newSweeper(b.db.Pool, fakeRoutes{ordered: []string{"ord"}, blocking: []string{"ord"}},
		func() { woken.Add(1) }, maintenanceConfig(), zerolog.Nop(), testMetrics())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	parked := func(eventID string) bool {
		var p bool
		if err := b.db.Pool.QueryRow(ctx, `SELECT available_at = '9999-12-31 00:00:00+00' FROM inbox WHERE event_id = $1`, eventID).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	waitFor(t, 10*time.Second, "the orphaned start bits deleted", func() bool {
		var n int
		if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox_starts WHERE token = 1`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	waitFor(t, 10*time.Second, "the row that waits for nothing unparked", func() bool { return !parked("k0000:001") })
	s.Stop()
	var recent int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox_starts WHERE token = 2`).Scan(&recent); err != nil {
		t.Fatal(err)
	}
	if recent != 1 {
		t.Error("the sweeper deleted a recent claim's start bits")
	}
	if !parked("k0000:002") {
		t.Error("the sweeper unparked a row whose key is held by the row before it")
	}
	if woken.Load() == 0 {
		t.Error("the claims were not woken for the unparked row")
	}
}

// The stats refresher runs alone: it sets the live-row gauges, and counts
// the keys held by dead rows of the routes it is told block.
func TestStatsRefresherRunsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, key, status, received_at)
		VALUES ('test', 'd1', 'ord', 'k1', 'dead', now()), ('test', 'd2', 'ord', 'k2', 'dead', now()),
		       ('test', 'r1', 'x', NULL, 'rejected', now()),
		       ('test', 'a', 'x', NULL, 'received', now() - interval '2 hours'), ('test', 'b', 'x', NULL, 'received', now())`); err != nil {
		t.Fatal(err)
	}
	cfg := maintenanceConfig()
	cfg.StaleAfter = time.Hour
	m := testMetrics()
	s := newStatsRefresher(b.db.Pool, fakeRoutes{ordered: []string{"ord"}, blocking: []string{"ord"}}, cfg, zerolog.Nop(), m)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the gauges set", func() bool { return testutil.ToFloat64(m.BlockedKeys) == 2 })
	s.Stop()
	for st, want := range map[string]float64{"received": 2, "processing": 0, "dead": 2, "rejected": 1} {
		if got := testutil.ToFloat64(m.Rows.WithLabelValues(st)); got != want {
			t.Errorf("rows{status=%q} = %v, want %v", st, got, want)
		}
	}
	if got := testutil.ToFloat64(m.StaleRows); got != 1 {
		t.Errorf("stale rows = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.OldestReceived); got < 7000 {
		t.Errorf("oldest received age = %vs, want 2 hours", got)
	}
}

// Retention is a service too: Start prunes at once and keeps pruning,
// Stop ends it, a second Start (or a startstop.Run) fails, and Stop twice
// is a no-op.
func TestRetentionStartStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.seedRetention(t, 20)
	r, err := NewRetention(b.db.Pool, worker.RetentionConfig{Processed: time.Hour, Interval: 20 * time.Millisecond}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Stop() // never started: a no-op
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the expired processed rows deleted", func() bool { return b.countLike(t, "old-%") == 0 })
	if err := r.Start(ctx); !errors.Is(err, startstop.ErrStarted) {
		t.Errorf("second Start = %v, want startstop.ErrStarted", err)
	}
	if err := startstop.Run(ctx, r); !errors.Is(err, startstop.ErrStarted) {
		t.Errorf("startstop.Run after Start = %v, want startstop.ErrStarted", err)
	}
	r.Stop()
	r.Stop()
	if n := b.countLike(t, "recent-%"); n != 10 {
		t.Errorf("%d recent processed rows left, want 10", n)
	}
}

// testMetrics are unregistered metrics for the services under test.
func testMetrics() *Metrics {
	return NewMetrics(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "db_errors_total"}, []string{"op"}))
}

// Every maintenance service keeps the start/stop contract
// (startstoptest.Contract), on a database that never answers: their
// rounds fail, which says nothing of how they start and stop.
func TestStartStopContract(t *testing.T) {
	t.Parallel()
	db := pgtest.Unreachable(t)
	cfg := maintenanceConfig()
	cfg.RescueInterval, cfg.StatsInterval = time.Hour, time.Hour
	routes := fakeRoutes{}
	for name, newService := range map[string]func() startstop.Service{
		"rescuer": func() startstop.Service {
			return newRescuer(db, routes, &countingUnparker{}, func() {}, cfg, zerolog.Nop(), testMetrics())
		},
		"sweeper": func() startstop.Service { return newSweeper(db, routes, func() {}, cfg, zerolog.Nop(), testMetrics()) },
		"stats":   func() startstop.Service { return newStatsRefresher(db, routes, cfg, zerolog.Nop(), testMetrics()) },
		"controls reader": func() startstop.Service {
			return NewControlsReader(db, pausedRoutes{}, func() {}, cfg, zerolog.Nop(), testMetrics())
		},
		"services": func() startstop.Service { return New(db, routes, func() {}, cfg, zerolog.Nop(), testMetrics()) },
		"retention": func() startstop.Service {
			r, err := NewRetention(db, worker.RetentionConfig{Interval: time.Hour}, zerolog.Nop(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			startstoptest.Contract(t, func(*testing.T) startstop.Service { return newService() })
		})
	}
}

// pausedRoutes answers the controls reader.
type pausedRoutes struct{}

func (pausedRoutes) SetControls([]driver.RouteControl) bool { return false }
