package engine

// Unit tests of the claimer (the claim plan, the poison search) and of
// adapt: they need no database.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/testkit"
	"github.com/inboxd/inboxd/worker"
)

// hold puts n jobs of size bytes on rs's books as running (n > 0) so that
// the plan sees the room taken.
func hold(p *Pool, rs *routeState, n int, size int64) {
	p.books.mu.Lock()
	defer p.books.mu.Unlock()
	for range n {
		id := int64(len(p.books.jobs) + 1)
		j := &job{row: claimedRow{driver.ClaimedRow{ID: id}}, size: size, route: rs}
		p.books.jobs[id] = j
		p.books.moveLocked(j, jobRunning, false)
	}
}

func TestClaimPlanOfAnIdlePool(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	if err := reg.Handle("x", handlers.Ignore(), handlers.Concurrency(2)); err != nil {
		t.Fatal(err)
	}
	cfg := worker.Config{Workers: 4, Prefetch: 4, ClaimBatch: 100, ClaimBytes: 1 << 20}
	p := unitPool(t, reg, cfg)
	req, activeRoom, activeCap := p.claimer.plan()
	// The default route: 4 + 4 of prefetch; x: 2 + 4*2/4 of prefetch.
	if req.limit != 12 || activeRoom != 0 || activeCap != 0 {
		t.Errorf("limit %d, active room %d of %d; want 12, no active route", req.limit, activeRoom, activeCap)
	}
	if req.maxBytes != cfg.ClaimBytes || !req.firstAlways {
		t.Errorf("bytes %d (first always %v), want all %d", req.maxBytes, req.firstAlways, cfg.ClaimBytes)
	}
	if !req.defaultOpen || !slices.Equal(req.open, []string{"x"}) || len(req.full) != 0 || !slices.Equal(req.routed, []string{"x"}) {
		t.Errorf("open %v, full %v, routed %v, default open %v", req.open, req.full, req.routed, req.defaultOpen)
	}
	slices.SortFunc(req.rooms, func(a, b routeRoom) int { return strings.Compare(a.route, b.route) })
	if want := []routeRoom{{route: "", room: 8, idle: 4}, {route: "x", room: 4, idle: 2}}; !slices.Equal(req.rooms, want) {
		t.Errorf("rooms %+v, want %+v", req.rooms, want)
	}
	if len(req.ordered) != 0 || req.chain != 0 || req.window != 0 {
		t.Errorf("ordered %v, chain %d, window %d without an ordered route", req.ordered, req.chain, req.window)
	}
}

func TestClaimPlanLeavesFullRoutesOut(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	if err := reg.Handle("x", handlers.Ignore(), handlers.Concurrency(2)); err != nil {
		t.Fatal(err)
	}
	p := unitPool(t, reg, worker.Config{Workers: 4, Prefetch: -1, ClaimBatch: 100, ClaimBytes: 2000})
	hold(p, p.books.routes.byKey["x"], 2, 100)
	req, _, _ := p.claimer.plan()
	if !slices.Equal(req.full, []string{"x"}) || len(req.open) != 0 || !req.defaultOpen {
		t.Errorf("open %v, full %v, default open %v; want x full", req.open, req.full, req.defaultOpen)
	}
	if req.limit != 4 || req.maxBytes != 1800 || req.firstAlways {
		t.Errorf("limit %d, bytes %d (first always %v); want the default route's 4, 1800 bytes", req.limit, req.maxBytes, req.firstAlways)
	}
	hold(p, p.books.routes.byKey[""], 4, 100)
	if req, _, _ := p.claimer.plan(); req.limit != 0 || req.defaultOpen || len(req.rooms) != 0 {
		t.Errorf("every route full: limit %d, default open %v, rooms %v", req.limit, req.defaultOpen, req.rooms)
	}
}

// The limit follows the active routes' room (plus claimSlack for the
// others), and outcomes not written yet stop claims once they are a full
// pool's worth.
func TestClaimPlanFollowsTheActiveRoutes(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	if err := reg.Handle("x", handlers.Ignore(), handlers.Concurrency(40)); err != nil {
		t.Fatal(err)
	}
	p := unitPool(t, reg, worker.Config{Workers: 100, Prefetch: -1, ClaimBatch: 500, ClaimBytes: 1 << 30})
	p.books.routes.byKey["x"].lastRows = time.Now()
	req, activeRoom, activeCap := p.claimer.plan()
	if activeRoom != 40 || activeCap != 40 || req.limit != 40+claimSlack {
		t.Errorf("active room %d of %d, limit %d; want 40 of 40, limit %d", activeRoom, activeCap, req.limit, 40+claimSlack)
	}
	p.books.mu.Lock()
	for i := range p.cfg.maxCapacity() {
		id := int64(1000 + i)
		p.books.jobs[id] = &job{row: claimedRow{driver.ClaimedRow{ID: id}}, state: jobDone, route: p.books.routes.byKey[""]}
	}
	p.books.mu.Unlock()
	if req, _, _ := p.claimer.plan(); req.limit != 0 {
		t.Errorf("limit %d with a pool's worth of outcomes unwritten, want 0", req.limit)
	}
}

// An ordered route's claims read chains: the window follows the rows the
// last claims took per head, and doubles while claims park.
func TestClaimPlanOfOrderedRoutes(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	if err := reg.Handle("o", handlers.Ignore(), handlers.Concurrency(100), handlers.Ordered(handlers.OnDeadBlock)); err != nil {
		t.Fatal(err)
	}
	if err := reg.Handle("s", handlers.Ignore(), handlers.Ordered(handlers.OnDeadSkip)); err != nil {
		t.Fatal(err)
	}
	p := unitPool(t, reg, worker.Config{Workers: 100, Prefetch: -1, ClaimBatch: 200, ClaimBytes: 1 << 30})
	req, _, _ := p.claimer.plan()
	slices.Sort(req.ordered)
	if !slices.Equal(req.ordered, []string{"o", "s"}) || !slices.Equal(req.blocking, []string{"o"}) {
		t.Errorf("ordered %v, blocking %v", req.ordered, req.blocking)
	}
	if req.limit != 200 || req.chain != orderedChain || req.window != 200 {
		t.Errorf("limit %d, chain %d, window %d; want 200, %d, 200 before any claim", req.limit, req.chain, req.window, orderedChain)
	}
	p.claimer.rowsPerHead = 10
	if req, _, _ := p.claimer.plan(); req.window != claimSlack {
		t.Errorf("window %d at 10 rows per head, want %d (the slack floor over 200/10)", req.window, claimSlack)
	}
	p.claimer.rowsPerHead, p.claimer.lastParked, p.claimer.lastWindow = 2, 60, 100
	if req, _, _ := p.claimer.plan(); req.window != 200 {
		t.Errorf("window %d while claims park half their window, want it doubled to 200", req.window)
	}
}

// Whatever the routes hold, the plan stays within its bounds. Seeded: the
// seed is logged.
func TestClaimPlanBounds(t *testing.T) {
	t.Parallel()
	rng := testkit.Rand(t)
	const seed = "(logged above)"
	for range 200 {
		reg := handlers.NewRegistry()
		types := rng.IntN(5)
		for i := range types {
			opts := []handlers.Option{handlers.Concurrency(1 + rng.IntN(20))}
			if rng.IntN(2) == 0 {
				opts = append(opts, handlers.Ordered(handlers.OnDeadBlock))
			}
			if err := reg.Handle(string(rune('a'+i)), handlers.Ignore(), opts...); err != nil {
				t.Fatal(err)
			}
		}
		cfg := worker.Config{Workers: 1 + rng.IntN(50), Prefetch: rng.IntN(20) - 1, ClaimBatch: 1 + rng.IntN(300), ClaimBytes: worker.MinClaimBytes + rng.Int64N(10000)}
		p := unitPool(t, reg, cfg)
		for _, rs := range p.books.routes.byKey {
			hold(p, rs, rng.IntN(rs.limit+rs.prefetch+1), rng.Int64N(100))
			if rng.IntN(2) == 0 {
				rs.lastRows = time.Now()
			}
		}
		req, activeRoom, activeCap := p.claimer.plan()
		rooms := 0
		for _, r := range req.rooms {
			rs := p.books.routes.byKey[r.route]
			if r.room <= 0 || r.room != rs.room() || r.idle < rs.idle() {
				t.Fatalf("seed %s: room %+v of route with room %d, idle %d", seed, r, rs.room(), rs.idle())
			}
			rooms += r.room
		}
		if req.limit < 0 || req.limit > cfg.ClaimBatch || req.limit > rooms {
			t.Fatalf("seed %s: limit %d, claim batch %d, rooms %d", seed, req.limit, cfg.ClaimBatch, rooms)
		}
		if activeRoom > activeCap || req.window > req.limit {
			t.Fatalf("seed %s: active room %d of %d, window %d of limit %d", seed, activeRoom, activeCap, req.window, req.limit)
		}
		if len(req.open)+len(req.full) != len(req.routed) {
			t.Fatalf("seed %s: open %v and full %v do not partition routed %v", seed, req.open, req.full, req.routed)
		}
		if req.maxBytes != cfg.ClaimBytes-p.books.heldBytes || req.firstAlways != (p.books.heldBytes == 0) {
			t.Fatalf("seed %s: bytes %d (first always %v) with %d held of %d", seed, req.maxBytes, req.firstAlways, p.books.heldBytes, cfg.ClaimBytes)
		}
	}
}

func TestAdaptSetsThePrefetchFromTheRate(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	rs := &routeState{basePrefetch: 2, prefetch: 2}
	rs.adapt(t0, 100)
	if rs.rate != 0 || rs.prefetch != 2 {
		t.Fatalf("first call: rate %v, prefetch %d; want it only to start measuring", rs.rate, rs.prefetch)
	}
	rs.returned = 10
	rs.adapt(t0.Add(50*time.Millisecond), 100)
	if rs.rate != 0 {
		t.Errorf("rate %v after 50ms, want no update under 100ms", rs.rate)
	}
	rs.returned = 400
	rs.adapt(t0.Add(time.Second), 100)
	// 400 returned in a second, smoothed from 0: 200/s; 250ms of it is 50.
	if rs.rate != 200 || rs.prefetch != 50 {
		t.Errorf("rate %v, prefetch %d; want 200/s, 50", rs.rate, rs.prefetch)
	}
	rs.returned = 10_400
	rs.adapt(t0.Add(2*time.Second), 100)
	if rs.prefetch != 100 {
		t.Errorf("prefetch %d at %v/s, want the cap 100", rs.prefetch, rs.rate)
	}
	rs.adapt(t0.Add(10*time.Second), 100)
	// Nothing returned in 8s: an old rate says nothing, the rate restarts at 0.
	if rs.rate != 0 || rs.prefetch != 2 {
		t.Errorf("after a quiet spell: rate %v, prefetch %d; want 0, the base 2", rs.rate, rs.prefetch)
	}
	fixed := &routeState{basePrefetch: 3, prefetch: 3}
	fixed.adapt(t0, 0)
	fixed.returned = 1000
	fixed.adapt(t0.Add(time.Second), 0)
	if fixed.prefetch != 3 || fixed.rate != 500 {
		t.Errorf("fixed prefetch: rate %v, prefetch %d; want the rate measured, the prefetch kept at 3", fixed.rate, fixed.prefetch)
	}
}

// A claim that fails on a row's data switches to single-row claims over
// as many rows as it asked for; other failures are the database's.
func TestPoisonSearchNarrowsToSingleRows(t *testing.T) {
	t.Parallel()
	p := unitPool(t, handlers.NewRegistry(), worker.Config{})
	bad := &pgconn.PgError{Code: "22P02", Message: "invalid input syntax"}
	for _, tt := range []struct {
		err  error
		data bool
	}{
		{bad, true},
		{&pgconn.PgError{Code: "54000"}, true},
		{&pgconn.PgError{Code: "XX001"}, true},
		{&pgconn.PgError{Code: "57P01"}, false},
		{&pgconn.PgError{Code: "42P01"}, false},
		{context.DeadlineExceeded, false},
	} {
		if got := driver.Classify(tt.err) == driver.DataError; got != tt.data {
			t.Errorf("%v: a row's data = %v, want %v", tt.err, got, tt.data)
		}
	}
	var s poisonSearch
	if !p.claimer.searchPoison(&s, claimRequest{limit: 5}, bad) || !s.active() || s.singles != 5 {
		t.Fatalf("after a batch failed: %+v, want 5 single-row claims", s)
	}
	for range 5 {
		s.claimed()
	}
	if s.active() {
		t.Errorf("still single rows after 5 claims succeeded: %+v", s)
	}
	s.claimed()
	if s.singles != 0 {
		t.Errorf("singles %d, want never below 0", s.singles)
	}
}
