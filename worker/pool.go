package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// Pool claims inbox rows and runs their handlers. Create it with New and
// start it with Run; a Pool runs once.
type Pool struct {
	cfg      Config
	db       *pgxpool.Pool // the engine's own statements
	claimDB  *pgxpool.Pool // claims, on sessions that always walk the received index in order; set by Run
	txdb     *pgxpool.Pool // transactional handlers' transactions; set by Run
	registry atomic.Pointer[handlers.Registry]
	log      zerolog.Logger
	metrics  *metrics

	// wake is signalled (without blocking) when rows may be available: a
	// notification arrived, a rescue returned rows, or a claim came back full.
	wake chan struct{}
	// freed is signalled when a claimed row is done with, making room for
	// another.
	freed     chan struct{}
	completer *completer // writes the outcomes
	leaser    *leaser    // renews the leases, writes the start marks

	mu        sync.Mutex
	jobs      map[int64]*job         // every claimed row until its outcome is written
	routes    map[string]*routeState // by route ("" for the default route)
	queued    int                    // jobs waiting for a handler, all routes
	running   int                    // jobs whose handler runs, all routes
	heldBytes int64                  // bytes (payloads, keys, headers) of queued and running jobs
	poisoned  []int64                // rows that can be neither claimed nor dead-lettered
	stopping  bool                   // no handler starts any more

	// claims holds the start bits of the claims whose rows are on the
	// books, by lease token (start.go). Guarded by mu.
	claims map[int64]*claimStarts
	// suspectRunning: a suspect's handler runs (job.suspect); the next one
	// waits for it.
	suspectRunning bool

	executors sync.WaitGroup  // the jobs handed to executors and not yet done
	idleExec  chan execTask   // unbuffered: idle executors wait for a job on it
	quit      chan struct{}   // closed when Run returns: idle executors end
	stop      context.Context // ends at the hard shutdown deadline; set by Run
	lastLoop  atomic.Int64    // unix nanoseconds when the claim loop last went round
	// rowsPerHead is how many rows recent claims took per row that was not
	// a chain's follower (smoothed); used and set by the claim loop alone.
	rowsPerHead float64
	lastParked  int64 // rows the last claim parked; set by the claim loop alone
	lastWindow  int   // due rows the last claim read at most; set by the claim loop alone

	runOnce sync.Once
	ready   chan struct{}
}

// result is the outcome of one job, for the completers.
type result struct {
	job       *job // nil in tests that write outcomes directly
	id        int64
	token     int64
	eventID   string
	eventType string
	typeLabel string        // event_type metric label: the type if routed, else "other"
	status    status.Status // processed, received (a retry or a release) or dead
	delay     time.Duration
	lastError *string
	release   bool // returned unattempted: do not count the attempt
	chained   bool // the next row of its key was claimed with it (see follow)
	outcome   string
}

var (
	errShutdown  = errors.New("worker shutting down")
	errLeaseLost = errors.New("lease lost: the row was rescued or claimed by another worker")
)

// New returns a Pool that runs handlers from registry on rows of the inbox
// table reachable through db, which carries the engine's own statements.
// Metrics are registered on reg (nil: none).
func New(db *pgxpool.Pool, registry *handlers.Registry, cfg Config, logger zerolog.Logger, reg prometheus.Registerer) (*Pool, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	if db == nil {
		return nil, errors.New("worker: nil database pool")
	}
	if registry == nil {
		return nil, errors.New("worker: nil handler registry")
	}
	p := &Pool{
		cfg:     cfg,
		db:      db,
		log:     logger.With().Str("component", "worker").Str("worker_id", cfg.ID).Logger(),
		metrics: newMetrics(reg),
		wake:    make(chan struct{}, 1),
		freed:   make(chan struct{}, 1),
		jobs:    make(map[int64]*job),
		ready:   make(chan struct{}),

		idleExec: make(chan execTask),
		quit:     make(chan struct{}),
		claims:   make(map[int64]*claimStarts),
	}
	p.completer = newCompleter(p, cfg.maxCapacity())
	p.leaser = newLeaser(p)
	p.registry.Store(registry)
	p.syncRoutesLocked(registry)
	return p, nil
}

// typeLabel is the event_type metric label for eventType: itself when the
// registry routes it, "other" otherwise (label values stay bounded).
func (p *Pool) typeLabel(eventType string) string {
	if p.registry.Load().Routed(eventType) {
		return eventType
	}
	return otherEventTypes
}

// Progress returns when the claim loop last went round: it does at least
// every PollInterval while idle, and after each claim (bounded by
// StatementTimeout) or failed claim's backoff. A watchdog uses it to tell a
// stuck daemon from an idle one. Zero before Run starts claiming.
func (p *Pool) Progress() time.Time {
	ns := p.lastLoop.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// SetRegistry replaces the handler registry, for example after the routes
// file was reloaded. Rows claimed from then on are handled by the new one;
// handlers already running finish as they are.
func (p *Pool) SetRegistry(r *handlers.Registry) {
	if r == nil {
		return
	}
	p.registry.Store(r)
	p.mu.Lock()
	p.syncRoutesLocked(r)
	var releases []*job
	for _, rs := range p.routes {
		releases = append(releases, p.dispatchLocked(rs)...)
	}
	p.mu.Unlock()
	p.releaseAtRisk(releases)
	signal(p.wake) // limits may have grown
}

// Ready is closed once Run has started listening for notifications (or
// given up on listening and fallen back to polling).
func (p *Pool) Ready() <-chan struct{} { return p.ready }

// Run claims and handles rows until ctx is cancelled, then shuts down in two
// steps: it stops claiming, gives rows that wait for a handler back at once,
// and waits up to ShutdownTimeout for running handlers; then it cancels the
// rest and releases their rows so other workers take them at once. Final
// row states are written even though ctx is done. Run returns within
// ShutdownTimeout + ShutdownMargin of ctx's cancellation, whatever the
// database does, and returns nil after a shutdown.
func (p *Pool) Run(ctx context.Context) error {
	started := false
	p.runOnce.Do(func() { started = true })
	if !started {
		return errors.New("worker: pool already ran")
	}
	defer close(p.quit)
	// Claims run on sessions of their own where the planner cannot choose a
	// bitmap or sequential scan: with statistics that lag a sudden backlog
	// (100,000 rows inserted after a quiet spell) it estimated a few hundred
	// due rows, sorted all of them on disk instead of walking the received
	// index in order, and claims took 100–300 ms instead of 5.
	cc := p.db.Config().Copy()
	cc.MaxConns, cc.MinConns = 2, 0
	cc.ConnConfig.RuntimeParams["enable_bitmapscan"] = "off"
	cc.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	// The claim is planned with its values every time, though prepared
	// once: with a generic plan PostgreSQL cannot simplify the filters
	// that depend on them (the types of the routes with room, @only) and
	// read the whole received index instead of its due end, which made
	// claims sixty times slower under a backlog of 100,000 rows. Prepared
	// (rather than sent as an unnamed statement each time) it is parsed
	// once and its rows come back in binary, payloads included.
	cc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	claimDB, err := pgxpool.NewWithConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("worker: open the claims' pool: %w", err)
	}
	defer claimDB.Close()
	p.claimDB = claimDB
	// Start marks run on sessions of their own too: a handler waits for its
	// mark, so the mark must never queue for a connection behind
	// completions, renewals and the rest of the engine's statements.
	// Their commits do not wait for the WAL flush (synchronous_commit off):
	// a committed mark is visible to every session at once, and survives
	// this process however it dies, which is all a mark is for; only a
	// crash of PostgreSQL itself may lose the last few, and a lost mark
	// refunds an attempt, as before marks existed. The flush was most of
	// a mark's time, which every queued row waits for.
	mc := p.db.Config().Copy()
	mc.MaxConns, mc.MinConns = numMarkWriters, 0
	mc.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	markDB, err := pgxpool.NewWithConfig(ctx, mc)
	if err != nil {
		return fmt.Errorf("worker: open the start marks' pool: %w", err)
	}
	defer markDB.Close()
	p.leaser.db = markDB
	p.txdb = p.cfg.TxDB
	if p.txdb == nil {
		pc := p.db.Config().Copy()
		pc.MaxConns = int32(p.cfg.TxConns)
		pc.MinConns = 0
		txdb, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return fmt.Errorf("worker: open the transactional handlers' pool: %w", err)
		}
		defer txdb.Close()
		p.txdb = txdb
	}

	// stop is cancelled at the hard deadline, ShutdownTimeout +
	// ShutdownMargin - ShutdownReserve after ctx: everything that must
	// finish at shutdown (outcome writes, lease renewals, a claim in
	// flight) runs under it.
	stop, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	go func() {
		select {
		case <-ctx.Done():
		case <-stop.Done():
			return
		}
		t := time.NewTimer(p.cfg.ShutdownTimeout + ShutdownMargin - ShutdownReserve)
		defer t.Stop()
		select {
		case <-t.C:
			hardStop()
		case <-stop.Done():
		}
	}()
	// Handlers run under workCtx, which outlives ctx by the shutdown budget.
	workCtx, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelWork(errShutdown)

	bg, bgCtx := errgroup.WithContext(ctx)
	bg.Go(func() error { p.listen(bgCtx); return nil })
	bg.Go(func() error { p.rescueLoop(bgCtx); return nil })
	bg.Go(func() error { p.statsLoop(bgCtx); return nil })

	_ = p.leaser.Start(stop)

	_ = p.completer.Start(stop)
	p.stop = stop

	p.claimLoop(ctx, stop, workCtx)

	// Rows claimed but not started go back at once; then, step 1: let the
	// running handlers finish within the budget.
	stopping := time.Now()
	released := p.releaseQueued()
	held, _ := p.load()
	p.log.Info().Int("inflight", held).Int("released", released).
		Dur("budget", p.cfg.ShutdownTimeout).Msg("stopping: no new claims")
	if !p.waitExecutors(time.Until(stopping.Add(p.cfg.ShutdownTimeout))) {
		// Step 2: cancel them; the executors release their rows.
		held, _ := p.load()
		p.log.Warn().Int("inflight", held).Msg("shutdown budget spent: cancelling handlers")
		cancelWork(errShutdown)
		if !p.waitExecutors(cancelGrace) {
			held, _ := p.load()
			p.log.Error().Int("inflight", held).Msg("handlers ignore cancellation: releasing their rows anyway")
			p.releaseStuck()
		}
	}
	// Outcomes still waiting are written (retrying until the hard
	// deadline), with their leases renewed meanwhile.
	p.completer.Stop()
	p.leaser.Stop()
	_ = bg.Wait()
	if n := len(p.snapshot()); n > 0 {
		p.log.Warn().Int("rows", n).
			Msg("stopped with outcomes unwritten (database unreachable): these rows return when their leases expire")
	}
	p.log.Info().Dur("took", time.Since(stopping).Round(time.Millisecond)).Msg("stopped")
	return nil
}

// claimLoop claims rows while ctx is live and queues them on their routes.
// Each route holds up to its concurrency plus its prefetch; the pool holds
// up to ClaimBytes of rows (payloads, keys, headers). Under a backlog it claims once half the room
// is free, so every statement takes a large batch; after a notification or
// a poll tick any room is worth a claim.
func (p *Pool) claimLoop(ctx, stop, workCtx context.Context) {
	poll := time.NewTicker(p.cfg.PollInterval)
	defer poll.Stop()
	pending, urgent := true, true
	// blockedByFull: the last claim found nothing while some route had no
	// room; room freeing up is then worth a claim.
	blockedByFull := false
	retry := backoff.NewRetrier(backoff.Exponential{Base: 100 * time.Millisecond, Max: 5 * time.Second})
	var bisect poisonSearch
	for {
		if ctx.Err() != nil {
			return
		}
		p.lastLoop.Store(p.cfg.Now().UnixNano())
		req, activeRoom, activeCap := p.claimPlan()
		// Under a backlog, claim once the routes that have rows have half
		// their room free, so every statement takes a large batch. A
		// notification or a poll tick is worth a claim sooner, with an
		// eighth of that room free (or none of it taken): new rows are not
		// kept waiting, and a busy pool does not spend a statement on a
		// handful of rows whenever a producer inserts.
		roomy := activeCap > 0 && activeRoom >= max(1, min(activeCap/2, p.cfg.ClaimBatch)) &&
			req.maxBytes >= p.cfg.ClaimBytes/2
		worthIt := activeCap == 0 || activeRoom >= max(1, min(activeCap/8, p.cfg.ClaimBatch/4))
		if pending && req.maxBytes > 0 && req.limit > 0 && (roomy || (urgent && worthIt)) {
			if bisect.active() {
				req.limit, req.chain, req.window = 1, 0, 0
			}
			got, parked, err := p.claim(stop, workCtx, req)
			if err != nil {
				p.metrics.dbErrors.WithLabelValues("claim").Inc()
				if driver.Classify(err) == driver.DataError && p.searchPoison(stop, workCtx, &bisect, req, err) {
					continue
				}
				delay := retry.Failed()
				p.log.Error().Err(err).Dur("retry_in", delay).Msg("claim failed")
				if !backoff.Sleep(ctx, delay) {
					return
				}
				continue
			}
			retry.Succeeded()
			bisect.claimed()
			// Claim again while claims find work: a short claim says little
			// (routes without room cap it); an empty one that parked nothing
			// says the due rows are all taken, or wait for a full route. A
			// claim that parked rows moved a key's backlog out of the way:
			// the next one goes at once, however little room there is (a
			// hot key's backlog would otherwise be parked one batch per
			// poll, with every other key's rows waiting behind it).
			found := got > 0 || parked > 0
			pending, urgent, blockedByFull = found, parked > 0, !found && len(req.full) > 0
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
			pending, urgent = true, true
		case <-poll.C:
			pending, urgent = true, true
		case <-p.freed:
			if blockedByFull {
				pending, urgent = true, true
			}
		}
	}
}

// claimPlan says what the next claim may take: each route's room and the
// rows that would start at once, the types to leave out, and the byte
// budget left. It also returns the room and the capacity (rows) of the
// active routes, those that got rows in recent claims.
func (p *Pool) claimPlan() (req claimRequest, activeRoom, activeCap int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	req = claimRequest{
		maxBytes:    p.cfg.ClaimBytes - p.heldBytes,
		firstAlways: p.heldBytes == 0,
	}
	now := p.cfg.Now()
	maxPrefetch := 0
	if p.cfg.adaptivePrefetch {
		maxPrefetch = 2 * p.cfg.ClaimBatch
	}
	for key, rs := range p.routes {
		rs.adapt(now, maxPrefetch)
		room := rs.room()
		if now.Sub(rs.lastRows) < activeFor {
			activeRoom += room
			activeCap += rs.limit + rs.prefetch
		}
		if key != "" {
			req.routed = append(req.routed, key)
			if room > 0 {
				req.open = append(req.open, key)
			} else {
				req.full = append(req.full, key)
			}
			if rs.policy.Ordered {
				req.ordered = append(req.ordered, key)
				if rs.policy.BlocksKey() {
					req.blocking = append(req.blocking, key)
				}
			}
		} else {
			req.defaultOpen = room > 0
		}
		if room > 0 {
			req.rooms = append(req.rooms, routeRoom{route: key, room: room, idle: rs.startSoon()})
			req.limit += room
		}
	}
	// Every candidate row is locked, taken or not, and a lock is a write:
	// the limit follows the room of the routes that have rows (active), with
	// a little more so that rows of a quiet route still come in (and make it
	// active), not the room of every route.
	if activeRoom > 0 {
		req.limit = min(req.limit, activeRoom+min(claimSlack, req.limit-activeRoom))
	}
	req.limit = min(req.limit, p.cfg.ClaimBatch)
	if len(req.ordered) > 0 {
		// Chains fill a claim behind fewer heads: read about as many due
		// rows as the last claims took heads for the rows they took. While
		// claims park a backlog (half their window or more), the window
		// doubles: parking a key's backlog out of the way goes a window at
		// a time.
		req.chain = orderedChain
		req.window = max(min(req.limit, claimSlack), int(math.Ceil(float64(req.limit)/max(1, p.rowsPerHead))))
		if p.lastParked > 0 && p.lastParked >= int64(p.lastWindow/2) {
			req.window = max(req.window, 2*p.lastWindow)
		}
		req.window = min(req.window, req.limit)
	}
	// Outcomes not yet written hold their rows (and leases) too: while the
	// completers are a full route's worth behind, claim nothing more; each
	// written batch signals freed.
	if len(p.jobs)-p.queued-p.running >= p.cfg.maxCapacity() {
		req.limit = 0
	}
	return req, activeRoom, activeCap
}

// orderedChain is how many rows of an ordered key a claim takes behind the
// key's head, read through the key index: they wait in the worker, each
// started once the one before it ended so that the key may go on. A key's
// backlog then costs a claim per orderedChain+1 rows, rather than a claim,
// a park and an unpark per row.
const orderedChain = 16

// claimSlack is how many rows a claim may take beyond the active routes'
// room, for the routes that had no rows of late.
const claimSlack = 32

// activeFor is how long after a claim gave it rows a route counts as
// active: its room decides when the next claim is large enough.
const activeFor = 2 * time.Second

// claimRequest is what one claim statement asks for.
type claimRequest struct {
	limit       int         // most rows
	rooms       []routeRoom // per route with room: how many rows, and how many start at once
	routed      []string    // the event types with a route of their own
	open, full  []string    // routed types with room, and without
	defaultOpen bool        // the default route (every other type) has room
	ordered     []string    // types of ordered routes
	blocking    []string    // types of ordered routes whose dead rows block their key
	maxBytes    int64       // most bytes of rows (payloads, keys, headers)
	firstAlways bool        // the first row even if it alone exceeds maxBytes
	only        int64       // just this row (0: any)
	chain       int         // most rows of an ordered key claimed behind its head (0: the head alone)
	window      int         // most due rows read and locked (0: limit); heads, whose chains fill the rest
}

// routeRoom is one route's room in a claim.
type routeRoom struct {
	route      string
	room, idle int
}

// claim takes due rows as req says and queues them on their routes. It
// returns how many rows it claimed and how many it parked (rows of ordered
// keys waiting behind an earlier row).
func (p *Pool) claim(stop, workCtx context.Context, req claimRequest) (int, int64, error) {
	token := rand.Int64()
	// The lease is counted from before the statement is sent: the database
	// starts it at some point during the round trip, never earlier.
	sent := p.cfg.Now()
	// A claim is not cancelled half-way by shutdown: had the UPDATE committed
	// with its result lost, its rows would sit in processing until their
	// leases expired. Claimed rows are handled (and drained) normally. It is
	// bounded by the statement timeout and the hard shutdown deadline.
	ctx, cancel := context.WithTimeout(stop, p.cfg.StatementTimeout)
	defer cancel()
	p.mu.Lock()
	skip := slices.Clone(p.poisoned)
	p.mu.Unlock()
	// The claim is planned with its values every time (see Run's
	// plan_cache_mode).
	c, err := driver.Claim(ctx, p.claimDB, p.claimParams(req, token, skip))
	if err != nil {
		return 0, 0, err
	}
	parked := c.Parked
	claimed := make([]claimedRow, len(c.Rows))
	for i := range c.Rows {
		claimed[i] = claimedRow(c.Rows[i])
	}
	p.metrics.claims.Inc()
	p.metrics.claimed.Add(float64(len(claimed)))
	p.lastParked, p.lastWindow = parked, cmp.Or(req.window, req.limit)
	if req.chain > 0 && len(claimed) > 0 {
		heads := 0
		for i := range claimed {
			if claimed[i].Pred == 0 {
				heads++
			}
		}
		p.rowsPerHead = 0.5*max(1, p.rowsPerHead) + 0.5*float64(len(claimed))/float64(max(1, heads))
	}
	// Rows go to the queue in claim order: the first ones are those marked
	// started, for the idle executors.
	slices.SortFunc(claimed, func(a, b claimedRow) int { return cmp.Compare(a.Rank, b.Rank) })
	suspects, err := p.suspects(ctx, claimed)
	if err != nil {
		// The rows are claimed: run them, only without the care for
		// suspects (the next claim of a suspect asks again).
		p.metrics.dbErrors.WithLabelValues("claim").Inc()
		p.log.Warn().Err(err).Msg("looking up rows rescued after a crash failed")
	}
	jobs := make([]*job, len(claimed))
	for i := range claimed {
		jctx, cancel := context.WithCancelCause(workCtx)
		jobs[i] = &job{
			ctx: jctx, cancel: cancel, row: claimed[i], token: token,
			size:        claimed[i].size(),
			leaseUntil:  sent.Add(p.cfg.Lease),
			dbStarted:   claimed[i].Started,
			claimMarked: claimed[i].Started,
			suspect:     suspects[claimed[i].ID],
		}
	}
	p.track(jobs)
	return len(claimed), parked, nil
}

// suspects returns which of the claimed rows were last rescued after a
// started attempt (sql/suspects.sql): one of them may have killed its
// worker. Only rows attempted before are looked up, so a claim of first
// attempts costs nothing.
func (p *Pool) suspects(ctx context.Context, claimed []claimedRow) (map[int64]bool, error) {
	var ids []int64
	for i := range claimed {
		if claimed[i].Attempts > 1 {
			ids = append(ids, claimed[i].ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	found, err := driver.Suspects(ctx, p.db, ids, expiredPrefix)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// claimParams are the claim statement's parameters for req.
func (p *Pool) claimParams(req claimRequest, token int64, skip []int64) driver.ClaimParams {
	rooms := make([]driver.RouteRoom, len(req.rooms))
	for i, r := range req.rooms {
		rooms[i] = driver.RouteRoom{Route: r.route, Room: r.room, Idle: r.idle}
	}
	return driver.ClaimParams{
		Limit:         req.limit,
		Window:        req.window,
		Rooms:         rooms,
		RoutedTypes:   req.routed,
		OpenTypes:     req.open,
		FullTypes:     req.full,
		DefaultOpen:   req.defaultOpen,
		OrderedTypes:  req.ordered,
		BlockingTypes: req.blocking,
		MaxBytes:      req.maxBytes,
		FirstAlways:   req.firstAlways,
		Only:          req.only,
		Chain:         req.chain,
		Skip:          skip,
		Token:         token,
		Lease:         p.cfg.Lease,
		Worker:        p.cfg.ID,
	}
}

// orderedTypes returns the types of ordered routes, and those among them
// whose dead rows block their key.
func (p *Pool) orderedTypes() (ordered, blocking []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ordered, blocking = []string{}, []string{}
	for key, rs := range p.routes {
		if key != "" && rs.policy.Ordered {
			ordered = append(ordered, key)
			if rs.policy.BlocksKey() {
				blocking = append(blocking, key)
			}
		}
	}
	return ordered, blocking
}

// BlockingTypes returns the event types of the pool's routes whose dead
// rows hold their key back (ordered, on_dead: block), as its routes are
// now (a reload changes them): retention keeps those dead rows
// (RetentionConfig.BlockingTypes).
func (p *Pool) BlockingTypes() []string {
	_, blocking := p.orderedTypes()
	return blocking
}

// maxAttemptsByType returns the routes whose max attempts differ from the
// pool's, for the rescuer.
func (p *Pool) maxAttemptsByType() (types []string, max []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	types, max = []string{}, []int32{}
	for key, rs := range p.routes {
		if key != "" && rs.policy.MaxAttempts != p.cfg.MaxAttempts {
			types = append(types, key)
			max = append(max, int32(rs.policy.MaxAttempts))
		}
	}
	return types, max
}

// signalOrdered wakes the claim loop when a row of an ordered route
// finished: the next row of its key was just unparked.
func (p *Pool) signalOrdered(eventType string) {
	p.mu.Lock()
	rs, ok := p.routes[eventType]
	ordered := ok && rs.policy.Ordered
	p.mu.Unlock()
	if ordered {
		signal(p.wake)
	}
}

// nonNil returns s, or an empty slice for nil (a NULL array would make
// `= ANY` unknown).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// releaseQueued stops handlers from starting and releases the rows still
// waiting in the routes' queues (claimed, no handler started); it reports
// how many.
func (p *Pool) releaseQueued() int {
	p.mu.Lock()
	p.stopping = true
	var queued []*job
	for _, rs := range p.routes {
		queued = append(queued, rs.queue...)
	}
	for _, j := range p.jobs {
		if j.state == jobWaiting {
			queued = append(queued, j)
		}
	}
	p.mu.Unlock()
	n := 0
	for _, j := range queued {
		if p.abandon(j) {
			p.completer.submit(p.releaseResult(j, "released unstarted at worker shutdown"))
			n++
		}
	}
	return n
}

// releaseStuck releases the rows of handlers that did not return after
// cancellation. Their eventual completions will be fenced.
func (p *Pool) releaseStuck() {
	for _, j := range p.snapshot() {
		if p.abandon(j) {
			p.completer.submit(p.releaseResult(j, "released unfinished at worker shutdown"))
		}
	}
}

// waitExecutors waits up to d for every running handler to return.
func (p *Pool) waitExecutors(d time.Duration) bool {
	done := make(chan struct{})
	go func() { p.executors.Wait(); close(done) }()
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// signal sends on ch without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// poisonSearch narrows down which row makes claims fail.
type poisonSearch struct {
	singles int // single-row claims left to try before batches resume
}

func (s *poisonSearch) active() bool { return s.singles > 0 }

func (s *poisonSearch) claimed() {
	if s.singles > 0 {
		s.singles--
	}
}

// searchPoison handles a claim that failed because of a row's data. A batch
// failure switches to single-row claims over as many rows as the batch
// asked for, since the culprit was among them; a single-row failure names
// the oldest due row as the suspect, confirms it with a claim of that row
// alone, and dead-letters it (or, if even that fails, skips it until
// restart). It reports whether to claim again at once.
func (p *Pool) searchPoison(stop, workCtx context.Context, s *poisonSearch, req claimRequest, claimErr error) bool {
	if limit := req.limit; limit > 1 {
		s.singles = limit
		p.log.Warn().Err(claimErr).Int("rows", limit).Msg("claim refused because of a row's data: claiming one row at a time to find it")
		return true
	}
	ctx, cancel := context.WithTimeout(stop, p.cfg.StatementTimeout)
	defer cancel()
	p.mu.Lock()
	skip := append([]int64{}, p.poisoned...)
	p.mu.Unlock()
	suspect, err := driver.PoisonCandidate(ctx, p.db, skip)
	if err != nil {
		return false
	}
	one := req
	one.limit, one.maxBytes, one.firstAlways, one.only, one.chain, one.window = 1, 1, true, suspect, 0, 0
	if _, _, err := p.claim(stop, workCtx, one); err == nil || driver.Classify(err) != driver.DataError {
		return err == nil // not the culprit after all (claimed normally), or the database is unwell
	}
	reason := fmt.Sprintf("claim refused by the database because of this row's data: %v", claimErr)
	p.metrics.poisoned.Inc()
	done, err := driver.Poison(ctx, p.db, suspect, *errText(errors.New(reason)))
	if err == nil && done {
		p.log.Error().Int64("row_id", suspect).Err(claimErr).Msg("row dead-lettered: its data makes every claim fail")
	} else {
		p.mu.Lock()
		if len(p.poisoned) < maxPoisoned {
			p.poisoned = append(p.poisoned, suspect)
		}
		p.mu.Unlock()
		p.log.Error().Int64("row_id", suspect).Err(claimErr).AnErr("dead_letter_error", err).
			Msg("row skipped until restart: its data makes every claim fail and it cannot be dead-lettered")
	}
	s.singles = 0
	return true
}

// maxPoisoned caps the rows skipped in memory.
const maxPoisoned = 1000
