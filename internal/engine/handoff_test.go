package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/maintenance"
)

// newRows are received rows of eventType as ingest writes them, source
// "test".
func newRows(eventType string, eventIDs ...string) []driver.NewRow {
	out := make([]driver.NewRow, len(eventIDs))
	for i, id := range eventIDs {
		out[i] = driver.NewRow{Source: "test", EventID: id, EventType: eventType,
			Payload: []byte(`{"id":"` + id + `"}`), Headers: []byte(`{"h":"v"}`), Status: status.Received}
	}
	return out
}

// handOff writes rows as ingest's writer does with p as its hand-off
// (ingestcore.PGWriter): reserve, insert, deliver. It returns the reservation
// (nil: none taken) and the reserved rows inserted.
func (b *bundle) handOff(t *testing.T, p *Pool, rows []driver.NewRow) (*driver.Reservation, []driver.Reserved) {
	t.Helper()
	ctx := context.Background()
	waitAccepting(t, p)
	res := p.Reserve(rows)
	_, got, err := driver.InsertBatch(ctx, b.db.Pool, rows, res)
	if err != nil {
		p.Cancel(res)
		t.Fatal(err)
	}
	p.Deliver(ctx, res, rows, got)
	return res, got
}

// waitAccepting waits until p, started, takes rows handed off (its
// components run: shortly after Ready).
func waitAccepting(t *testing.T, p *Pool) {
	t.Helper()
	waitFor(t, 10*time.Second, "the pool accepting hand-offs", func() bool {
		p.books.mu.Lock()
		defer p.books.mu.Unlock()
		return p.books.accepting
	})
}

// reservedCount is how many places res took.
func reservedCount(res *driver.Reservation) int {
	if res == nil {
		return 0
	}
	n := 0
	for _, p := range res.Pos {
		if p > 0 {
			n++
		}
	}
	return n
}

// gate is a handler that blocks until released, counting its calls by
// event id.
type gate struct {
	mu      sync.Mutex
	calls   map[string]int
	events  map[string]handlers.Event
	entered chan string
	release chan struct{}
}

func newGate() *gate {
	return &gate{calls: map[string]int{}, events: map[string]handlers.Event{}, entered: make(chan string, 100),
		release: make(chan struct{})}
}

func (g *gate) handle(ctx context.Context, ev *handlers.Event) error {
	g.mu.Lock()
	g.calls[ev.EventID]++
	g.events[ev.EventID] = *ev
	g.mu.Unlock()
	g.entered <- ev.EventID
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (g *gate) count(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[id]
}

// Rows handed off at ingest run at once with no claim: they are stored
// received, reserved for this pool (other claims skip them), seen as
// waiting by the gauges, and their outcome is fenced by the reservation's
// token. A duplicate is never handed off.
func TestHandOffRunsRowsWithoutAClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	g := newGate()
	if err := b.reg.HandleFunc("x", g.handle); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.HandOff = true
	p := b.start(t, cfg)

	res, got := b.handOff(t, p.Pool, newRows("x", "a", "b", "c"))
	if reservedCount(res) != 3 || len(got) != 3 {
		t.Fatalf("reserved %d rows, %d inserted; want 3 and 3", reservedCount(res), len(got))
	}
	for range 3 {
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("handed-off rows did not start")
		}
	}
	// While their handlers run, the rows are received and reserved.
	for _, id := range []string{"a", "b", "c"} {
		r := b.row(t, id)
		if r.Status != "received" || r.Attempts != 1 || r.LeaseToken == nil || *r.LeaseToken != res.Token ||
			time.Until(r.AvailableAt) < cfg.Lease/2 {
			t.Fatalf("row %s while its handler runs: %+v (token %d); want received, attempts 1, the reservation's token, due after the lease",
				id, r, res.Token)
		}
	}
	var lockedBy string
	var lapses time.Duration
	if err := b.db.Pool.QueryRow(ctx, `SELECT max(locked_by), max(lease_expires_at - available_at) FROM inbox`).
		Scan(&lockedBy, &lapses); err != nil {
		t.Fatal(err)
	}
	if lockedBy != p.cfg.ID || lapses != 0 {
		t.Fatalf("locked_by %q, lease_expires_at - available_at %s; want %q, 0", lockedBy, lapses, p.cfg.ID)
	}
	st, err := driver.ReadStats(ctx, b.db.Pool, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if st.Received != 3 || st.Processing != 0 {
		t.Fatalf("stats while the handlers run: %d received, %d processing; want 3, 0", st.Received, st.Processing)
	}
	if ev := g.events["a"]; ev.Attempt != 1 || ev.Headers["h"] != "v" || string(ev.Payload) != `{"id":"a"}` || ev.ID != got[0].ID {
		t.Fatalf("event a = %+v", ev)
	}

	// A redelivered row and a new one, with one idle handler left: the
	// duplicate takes the place but is not inserted, so it is not handed
	// off (its handler does not run again); the new row waits for a claim.
	res2, got2 := b.handOff(t, p.Pool, newRows("x", "a", "d"))
	if reservedCount(res2) != 1 || res2.Pos[0] != 1 || len(got2) != 0 {
		t.Fatalf("second batch: places %v, %d reserved rows inserted; want [1 0], 0", res2, len(got2))
	}
	select {
	case id := <-g.entered:
		if id != "d" {
			t.Fatalf("handler entered for %s, want d", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("d did not start")
	}
	close(g.release)
	waitFor(t, 10*time.Second, "all processed", func() bool { return b.countStatus(t, "processed") == 4 })
	for _, id := range []string{"a", "b", "c", "d"} {
		if n := g.count(id); n != 1 {
			t.Errorf("%s handled %d times, want 1", id, n)
		}
		if r := b.row(t, id); r.Attempts != 1 || r.LeaseToken != nil {
			t.Errorf("%s processed: %+v", id, r)
		}
	}
	if n := testutil.ToFloat64(p.metrics.claimed); n != 1 {
		t.Errorf("%v rows claimed, want 1 (d)", n)
	}
	if n := testutil.ToFloat64(p.metrics.handedOff); n != 3 {
		t.Errorf("inboxd_worker_handed_off_rows_total = %v, want 3", n)
	}
	p.books.mu.Lock()
	defer p.books.mu.Unlock()
	if p.books.heldBytes != 0 || len(p.books.reservations) != 0 || p.books.routes.byKey["x"].reserved != 0 {
		t.Errorf("room not given back: %d bytes held, %d reservations, %d reserved", p.books.heldBytes, len(p.books.reservations), p.books.routes.byKey["x"].reserved)
	}
}

// Only rows a claim would hand straight to an idle handler are handed
// off: within the route's concurrency and the byte budget, never rows of
// ordered, paused, rate-limited or breaker-open routes, never rejected
// rows, never while the pool does not run.
func TestHandOffTakesOnlyWhatAClaimWouldStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	g := newGate()
	defer close(g.release)
	for typ, opts := range map[string][]handlers.Option{
		"one":     {handlers.Concurrency(1)},
		"ordered": {handlers.Ordered(handlers.OnDeadBlock)},
		"limited": {handlers.RateLimit(100, 10)},
		"paused":  nil,
	} {
		if err := b.reg.HandleFunc(typ, g.handle, opts...); err != nil {
			t.Fatal(err)
		}
	}
	idle := newTestPool(t, b)
	if res := idle.Reserve(newRows("one", "n1")); res != nil {
		t.Fatalf("a pool that does not run reserved %v", res.Pos)
	}
	if err := driver.PauseRoute(ctx, b.db.Pool, "paused", "test", "test"); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.ClaimBytes, cfg.HandOff = 2048, true
	p := b.start(t, cfg)

	rows := newRows("one", "o1", "o2", "o3")
	rows = append(rows, newRows("ordered", "k1")...)
	rows[len(rows)-1].Key = []byte("key")
	rows = append(rows, newRows("limited", "l1")...)
	rows = append(rows, newRows("paused", "p1")...)
	rejected := newRows("", "test/0/1")[0]
	rejected.Status, rejected.LastError = status.Rejected, "no type"
	rows = append(rows, rejected)
	big := newRows("other", "big")[0]
	big.Payload = make([]byte, 4000) // beyond ClaimBytes
	rows = append(rows, big)
	rows = append(rows, newRows("other", "small")...)

	res, got := b.handOff(t, p.Pool, rows)
	want := []int32{1, 0, 0, 0, 0, 0, 0, 0, 2}
	if res == nil || fmt.Sprint(res.Pos) != fmt.Sprint(want) || len(got) != 2 {
		t.Fatalf("reserved places %v, %d inserted; want %v (o1 and small), 2", res, len(got), want)
	}
	for range 2 {
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("handed-off rows did not start")
		}
	}
	// A route at its concurrency takes nothing more.
	if res := p.Reserve(newRows("one", "o4")); res != nil {
		t.Fatalf("a busy route reserved %v", res.Pos)
	}
}

// A replica that dies after inserting rows reserved for itself leaves
// them to any claim once the reservation lapses: not before (other
// replicas' claims skip it), and then with its attempt counted and the
// rescuer's reason, as a row whose claimed lease expired; the claim writes
// that attempt to the row's history (the reservation counted it from the
// insert: its handler starts at once). A row the same claim takes that
// held no reservation gets no entry.
func TestLapsedReservationGoesToAClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var handled atomic.Int32
	var lastAttempt atomic.Int32
	if err := b.reg.HandleFunc("x", func(_ context.Context, ev *handlers.Event) error {
		handled.Add(1)
		lastAttempt.Store(int32(ev.Attempt))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// What a dead replica left: a reserved row, and a plain one written by
	// the same insert.
	rows := newRows("x", "reserved", "plain")
	res := &driver.Reservation{Token: 42, Lease: 3 * time.Second, Worker: "dead-replica", Pos: []int32{1, 0}}
	if _, got, err := driver.InsertBatch(ctx, b.db.Pool, rows, res); err != nil || len(got) != 1 {
		t.Fatalf("InsertBatch: %v, %v", got, err)
	}
	p := b.start(t, testConfig())
	// The plain row is claimed and processed; the claim that took it
	// skipped the reserved one.
	waitFor(t, 10*time.Second, "the plain row processed", func() bool { return b.row(t, "plain").Status == "processed" })
	if r := b.row(t, "reserved"); r.Status != "received" || r.LeaseToken == nil || *r.LeaseToken != 42 || handled.Load() != 1 {
		t.Fatalf("the reservation was taken before it lapsed: %+v, %d handled", r, handled.Load())
	}
	waitFor(t, 15*time.Second, "the lapsed reservation processed", func() bool { return b.row(t, "reserved").Status == "processed" })
	r := b.row(t, "reserved")
	if r.Attempts != 2 || lastAttempt.Load() != 2 || !strings.HasPrefix(errString(r.LastError), maintenance.ExpiredPrefix+"1 (worker dead-replica lost the row)") {
		t.Fatalf("lapsed reservation: %+v, last_error %q, handler saw attempt %d; want attempts 2 and the rescuer's reason",
			r, errString(r.LastError), lastAttempt.Load())
	}
	if n := testutil.ToFloat64(p.metrics.claimed); n != 2 {
		t.Errorf("%v rows claimed, want 2", n)
	}
	// The claim wrote the reservation's attempt to its history, as the
	// rescuer writes a lost attempt; the plain row, claimed beside it and
	// processed at its first attempt, keeps nothing.
	h := b.history(t, "reserved")
	if got := outcomesOf(h); !slices.Equal(got, []string{"lease expired", outcomeProcessed}) {
		t.Fatalf("the lapsed reservation's history %v (%+v), want lease expired, processed", got, h)
	}
	if a := h[0]; a.Attempt != 1 || a.Worker != "dead-replica" || a.Error != errString(r.LastError) ||
		a.FinishedAt.Sub(a.StartedAt) != 3*time.Second {
		t.Errorf("the reservation's attempt %+v: want attempt 1 of dead-replica, its 3 s reservation, error %q", a, errString(r.LastError))
	}
	if h := b.history(t, "plain"); len(h) != 0 {
		t.Errorf("the plain row's history %+v, want none", h)
	}
}

// A handed-off row whose reservation lapsed (its replica stalled) and was
// claimed by another replica is fenced: the first replica's outcome is not
// applied, and its renewal finds the row lost.
func TestHandedOffRowIsFencedOnceClaimedElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	slowGate := newGate()
	slowReg := handlers.NewRegistry()
	if err := slowReg.HandleFunc("x", slowGate.handle); err != nil {
		t.Fatal(err)
	}
	slowCfg := testConfig()
	slowCfg.Workers, slowCfg.Prefetch, slowCfg.HandOff = 1, -1, true
	slow := (&bundle{db: b.db, reg: slowReg}).start(t, slowCfg)
	if res, _ := b.handOff(t, slow.Pool, newRows("x", "e-1")); reservedCount(res) != 1 {
		t.Fatal("not handed off")
	}
	<-slowGate.entered
	fastGate := newGate()
	fastReg := handlers.NewRegistry()
	if err := fastReg.HandleFunc("x", fastGate.handle); err != nil {
		t.Fatal(err)
	}
	fast := (&bundle{db: b.db, reg: fastReg}).start(t, testConfig())
	// The reservation lapses, as if the slow replica had stalled past it;
	// again while the other replica has not claimed the row, should the
	// slow replica's renewal (fenced by the token alone) have extended it
	// meanwhile, as it does on a loaded machine.
	lapse := time.NewTicker(500 * time.Millisecond)
	defer lapse.Stop()
	deadline := time.After(30 * time.Second)
	for claimed := false; !claimed; {
		if _, err := b.db.Pool.Exec(ctx, `UPDATE inbox SET available_at = now() - interval '1 second',
			lease_expires_at = now() - interval '1 second' WHERE status = 'received'`); err != nil {
			t.Fatal(err)
		}
		select {
		case <-fastGate.entered:
			claimed = true
		case <-lapse.C:
		case <-deadline:
			t.Fatal("the other replica did not claim the lapsed reservation")
		}
	}
	r := b.row(t, "e-1")
	if r.Status != "processing" || r.Attempts != 2 {
		t.Fatalf("claimed elsewhere: %+v", r)
	}
	// The slow handler either finishes (its outcome fenced) or is
	// cancelled by its renewal finding the lease lost: either way nothing
	// it says is applied.
	close(slowGate.release)
	waitFor(t, 10*time.Second, "the slow replica's outcome fenced or its lease lost", func() bool {
		return testutil.ToFloat64(slow.metrics.fenced)+testutil.ToFloat64(slow.metrics.leaseLost) >= 1
	})
	if r2 := b.row(t, "e-1"); r2.Status != "processing" || r2.LeaseToken == nil || *r2.LeaseToken != *r.LeaseToken {
		t.Fatalf("the fenced replica changed the row: %+v", r2)
	}
	close(fastGate.release)
	waitFor(t, 10*time.Second, "processed by the second replica", func() bool { return b.row(t, "e-1").Status == "processed" })
	if got := testutil.ToFloat64(slow.metrics.completed.WithLabelValues(outcomeProcessed, "x")); got != 0 {
		t.Fatalf("the fenced replica counted %v processed", got)
	}
	_ = fast
}

// A handed-off row whose handler outlives the lease keeps its
// reservation: renewals move its available_at with the lease, so no other
// replica's claim takes it.
func TestHandedOffRowIsRenewed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	g := newGate()
	if err := b.reg.HandleFunc("x", g.handle); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Lease, cfg.HandOff = time.Second, true
	p := b.start(t, cfg)
	other := newGate()
	defer close(other.release)
	otherReg := handlers.NewRegistry()
	if err := otherReg.HandleFunc("x", other.handle); err != nil {
		t.Fatal(err)
	}
	(&bundle{db: b.db, reg: otherReg}).start(t, testConfig())

	if res, _ := b.handOff(t, p.Pool, newRows("x", "long")); reservedCount(res) != 1 {
		t.Fatal("not handed off")
	}
	<-g.entered
	first := b.row(t, "long").AvailableAt
	// Three leases' time: without renewals the row would lapse and the
	// other replica (polling every 50 ms) would claim it.
	waitFor(t, 10*time.Second, "three renewals", func() bool { return testutil.ToFloat64(p.metrics.renewals) >= 3 })
	r := b.row(t, "long")
	if r.Status != "received" || !r.AvailableAt.After(first) || time.Until(r.AvailableAt) <= 0 {
		t.Fatalf("after renewals: %+v (first available_at %s)", r, first)
	}
	close(g.release)
	waitFor(t, 10*time.Second, "processed", func() bool { return b.row(t, "long").Status == "processed" })
	if n := other.count("long"); n != 0 {
		t.Fatalf("the other replica ran the renewed row %d times", n)
	}
	var processedBy int
	if err := b.db.Pool.QueryRow(ctx, `SELECT attempts FROM inbox`).Scan(&processedBy); err != nil || processedBy != 1 {
		t.Fatalf("attempts = %d, %v; want 1", processedBy, err)
	}
}

// Rows reserved before the pool began to stop and inserted after it are
// given back at once, unstarted, with their attempts refunded.
func TestHandOffDuringShutdownGivesRowsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := b.reg.HandleFunc("x", func(context.Context, *handlers.Event) error {
		return errors.New("must not run")
	}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.HandOff = true
	p := b.start(t, cfg)
	waitAccepting(t, p.Pool)
	rows := newRows("x", "late")
	res := p.Reserve(rows)
	if reservedCount(res) != 1 {
		t.Fatal("not reserved")
	}
	p.stop(t)
	_, got, err := driver.InsertBatch(ctx, b.db.Pool, rows, res)
	if err != nil || len(got) != 1 {
		t.Fatalf("InsertBatch: %v, %v", got, err)
	}
	p.Deliver(ctx, res, rows, got)
	r := b.row(t, "late")
	if r.Status != "received" || r.Attempts != 0 || r.LeaseToken != nil || time.Until(r.AvailableAt) > 0 ||
		!strings.Contains(errString(r.LastError), "released unstarted at worker shutdown") {
		t.Fatalf("row handed off during shutdown: %+v, last_error %q; want received, due, attempts 0, unreserved", r, errString(r.LastError))
	}
}

// What the hand-off may reserve for a route: its idle handlers, and the
// rows due to start within premarkHorizon at the higher of its measured
// rate and the rate its handlers could sustain (concurrency over run
// time), behind the rows it holds.
func TestHandOffSoonUsesTheHandlersCapacity(t *testing.T) {
	t.Parallel()
	rs := &routeState{limit: 4, prefetch: 100}
	if got := rs.handOffSoon(); got != 4 {
		t.Fatalf("before any handler returned: %d, want the 4 idle handlers", got)
	}
	rs.ranFor(time.Millisecond) // 4 handlers of 1 ms: 4,000 rows/s, 80 in 20 ms
	if got := rs.handOffSoon(); got != 84 {
		t.Fatalf("handOffSoon = %d, want 4 idle + 80", got)
	}
	rs.running, rs.queue = 4, make([]*job, 30)
	if got := rs.handOffSoon(); got != 50 {
		t.Fatalf("busy, 30 queued: %d, want 80 - 30", got)
	}
	rs.rate = 10_000 // measured higher than the capacity: the higher counts
	if got := rs.handOffSoon(); got != 170 {
		t.Fatalf("measured 10,000/s: %d, want 200 - 30", got)
	}
	slow := &routeState{limit: 4, running: 4}
	slow.ranFor(time.Second) // 4 rows/s: none due within 20 ms
	if got := slow.handOffSoon(); got != 0 {
		t.Fatalf("slow handlers, all busy: %d, want 0", got)
	}
}

// The bytes held stay within ClaimBytes whichever path brings the rows:
// the hand-off leaves alone the budget of a claim in flight (with a
// hand-off, a claim takes half of what is left), and never takes a row
// over handOffMaxRowBytes (stored plainly, claimed).
func TestHandOffKeepsTheByteBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate()
	defer close(g.release)
	if err := b.reg.HandleFunc("x", g.handle); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.ClaimBytes, cfg.HandOff, cfg.Workers = 1<<20, true, 16
	p := b.start(t, cfg)
	waitAccepting(t, p.Pool)

	big := newRows("x", "big")
	big[0].Payload = make([]byte, handOffMaxRowBytes+1)
	if res := p.Reserve(big); res != nil {
		p.Cancel(res)
		t.Fatalf("a row over %d bytes was reserved", handOffMaxRowBytes)
	}
	// A claim in flight that may fill 600 KiB of the 1 MiB budget: of ten
	// rows of 60 KiB (16 idle handlers), seven fit beside it.
	p.books.mu.Lock()
	p.books.claimingBytes = 600 << 10
	p.books.mu.Unlock()
	rows := newRows("x", "r1", "r2", "r3", "r4", "r5")
	for i := range rows {
		rows[i].Payload = make([]byte, 60<<10)
	}
	res := p.Reserve(append(rows, rows...)) // 600 KiB offered
	if n := reservedCount(res); n != 7 {    // 7 × 60 KiB = 420 KiB <= the 424 KiB left
		t.Fatalf("reserved %d rows of 60 KiB beside a claim's 600 KiB, want 7", n)
	}
	p.books.mu.Lock()
	held := p.books.heldBytes + p.books.claimingBytes
	p.books.claimingBytes = 0
	p.books.mu.Unlock()
	p.Cancel(res)
	if held > cfg.ClaimBytes {
		t.Fatalf("held + claiming = %d bytes, over ClaimBytes %d", held, cfg.ClaimBytes)
	}
}
