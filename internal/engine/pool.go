package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/worker"
)

// Pool claims inbox rows and runs their handlers. Create it with New and
// start it with Run; a Pool runs once.
//
// A Pool is the thin owner of the engine's components (see the package
// documentation), which it wires and starts and stops in Run, and of the
// books they share under mu: the jobs, the routes, and the one transition
// of a job's state (moveLocked, job.go).
type Pool struct {
	cfg      settings
	db       *pgxpool.Pool // the engine's own statements
	registry atomic.Pointer[handlers.Registry]
	log      zerolog.Logger
	metrics  *metrics

	// wake is signalled (without blocking) when rows may be available: a
	// notification arrived, a rescue returned rows, or a claim came back full.
	wake chan struct{}
	// freed is signalled when a claimed row is done with, making room for
	// another.
	freed     chan struct{}
	claimer   *claimer   // claims rows and queues them
	executor  *executor  // runs the handlers of the dispatched jobs
	completer *completer // writes the outcomes
	leaser    *leaser    // renews the leases, writes the start marks

	mu        sync.Mutex
	jobs      map[int64]*job         // every claimed row until its outcome is written
	routes    map[string]*routeState // by route ("" for the default route)
	heldBytes int64                  // bytes (payloads, keys, headers) of queued and running jobs
	stopping  bool                   // no handler starts any more
	// pausedKnown is the paused routes as last read (controls.go), by
	// their driver names, for the routes a reload adds.
	pausedKnown map[string]bool

	// claims holds the start bits of the claims whose rows are on the
	// books, by lease token (start.go). Guarded by mu.
	claims map[int64]*claimStarts
	// reservations is the room taken by the rows being inserted by ingest
	// for this pool's handlers, by lease token (handoff.go); accepting is
	// true while the pool takes such rows (from its start until it stops).
	// Guarded by mu.
	reservations map[int64]*reservation
	accepting    bool
	// claimingBytes is the byte budget of the claim in flight (claimer.claim),
	// which the hand-off leaves alone. Guarded by mu.
	claimingBytes int64
	// breakers is set while some route has a circuit breaker (set by
	// syncRoutesLocked): attemptEnded takes mu only then.
	breakers atomic.Bool
	// suspectRunning: a suspect's handler runs (job.suspect); the next one
	// waits for it.
	suspectRunning bool

	runOnce sync.Once
	ready   chan struct{}

	// cancelNow is closed by CancelRunning; cancelCause is the cause it
	// gave, set before the close.
	cancelNow   chan struct{}
	cancelOnce  sync.Once
	cancelCause error
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
func New(db *pgxpool.Pool, registry *handlers.Registry, cfg worker.Config, logger zerolog.Logger, reg prometheus.Registerer) (*Pool, error) {
	set, err := newSettings(cfg)
	if err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	if db == nil {
		return nil, errors.New("worker: nil database pool")
	}
	if registry == nil {
		return nil, errors.New("worker: nil handler registry")
	}
	p := &Pool{
		cfg:     set,
		db:      db,
		log:     logger.With().Str("component", "worker").Str("worker_id", set.ID).Logger(),
		metrics: newMetrics(reg),
		wake:    make(chan struct{}, 1),
		freed:   make(chan struct{}, 1),
		jobs:    make(map[int64]*job),
		ready:   make(chan struct{}),

		cancelNow: make(chan struct{}),

		claims:       make(map[int64]*claimStarts),
		reservations: make(map[int64]*reservation),
	}
	p.claimer = &claimer{p: p}
	p.executor = newExecutor(p)
	p.completer = newCompleter(p, set.maxCapacity())
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
	ns := p.claimer.lastLoop.Load()
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

// CancelRunning cuts the first step of the shutdown short: once Run's
// context is done (before or after this call), the running handlers'
// contexts are cancelled at once rather than after ShutdownTimeout, with
// cause wrapped in their cause (context.Cause; nil: the pool's own), and
// their rows are released unattempted, as when the budget is spent. It
// does not stop the pool by itself; calls after the first do nothing.
func (p *Pool) CancelRunning(cause error) {
	p.cancelOnce.Do(func() {
		p.cancelCause = cause
		close(p.cancelNow)
	})
}

// Run claims and handles rows until ctx is cancelled, then shuts down in two
// steps: it stops claiming, gives rows that wait for a handler back at once,
// and waits up to ShutdownTimeout for running handlers; then it cancels the
// rest and releases their rows so other workers take them at once. Final
// row states are written even though ctx is done. Run returns within
// ShutdownTimeout + worker.ShutdownMargin of ctx's cancellation, whatever the
// database does, and returns nil after a shutdown.
func (p *Pool) Run(ctx context.Context) error {
	started := false
	p.runOnce.Do(func() { started = true })
	if !started {
		return errors.New("worker: pool already ran")
	}
	defer p.executor.Stop()
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
	// A claim's commit does not wait for the WAL flush either: claims run
	// one at a time, so the flush was a claim's latency and the pool's
	// rate. Nothing can depend on a claim that PostgreSQL loses in a crash
	// of its own: every outcome, transactional handler's commit and start
	// mark that follows it is written after it in the WAL, so none of them
	// survives without it; its rows are then received again (with the
	// attempt uncounted), and a plain handler that ran is run again, as
	// for any lost lease.
	cc.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	claimDB, err := pgxpool.NewWithConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("worker: open the claims' pool: %w", err)
	}
	defer claimDB.Close()
	p.claimer.db = claimDB
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
	p.executor.txdb = p.cfg.TxDB
	if p.executor.txdb == nil {
		pc := p.db.Config().Copy()
		pc.MaxConns = int32(p.cfg.TxConns)
		pc.MinConns = 0
		txdb, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return fmt.Errorf("worker: open the transactional handlers' pool: %w", err)
		}
		defer txdb.Close()
		p.executor.txdb = txdb
	}

	// stop is cancelled at the hard deadline, ShutdownTimeout +
	// worker.ShutdownMargin - worker.ShutdownReserve after ctx: everything that must
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
		t := time.NewTimer(p.cfg.ShutdownTimeout + worker.ShutdownMargin - worker.ShutdownReserve)
		defer t.Stop()
		select {
		case <-t.C:
			hardStop()
		case <-stop.Done():
		}
	}()
	// Handlers run under workCtx, which outlives ctx by the shutdown budget.
	// The jobs' own contexts derive from it without its cancellation
	// (context.WithoutCancel), so that creating and ending one is not a
	// registration with a parent shared by every job (a map insert and a
	// delete, under the parent's lock, per row): cancelWork cancels them
	// one by one instead.
	workCtx, cancelWorkCtx := context.WithCancelCause(context.WithoutCancel(ctx))
	cancelWork := func(cause error) {
		cancelWorkCtx(cause)
		for _, j := range p.snapshot() {
			j.cancel(cause)
		}
	}
	defer cancelWork(errShutdown)

	bg, bgCtx := errgroup.WithContext(ctx)
	bg.Go(func() error { p.listen(bgCtx); return nil })
	maint := newMaintenance(p)
	_ = maint.Start(bgCtx) // fails only if started before: it is new
	// The route controls (controls.go): the paused routes are read once
	// before the first claim, so that a route paused while no replica ran
	// is not claimed at start, then every half second.
	controls := maintenance.NewControlsReader(p.db, p, func() { signal(p.wake) }, p.cfg.Config, p.log, p.metrics.maintenance)
	controls.Round(ctx)
	_ = controls.Start(bgCtx) // new: cannot have started before

	// The components (service.go): the leaser and the completer run until
	// the last outcome is written (or the hard deadline), the claimer
	// until ctx ends; the executor's goroutines start with the jobs.
	// Their Starts fail only before launching anything, which these do not.
	p.executor.stopCtx = stop
	p.claimer.stopCtx, p.claimer.work = stop, context.WithoutCancel(workCtx)
	_ = p.leaser.Start(stop)
	_ = p.completer.Start(stop)
	_ = p.claimer.Start(ctx)
	p.mu.Lock()
	p.accepting = true // rows handed off at ingest (handoff.go) run from now on
	p.mu.Unlock()
	<-ctx.Done()
	p.claimer.Stop()

	// Rows claimed but not started go back at once; then, step 1: let the
	// running handlers finish within the budget.
	stopping := time.Now()
	released := p.releaseQueued()
	held, _ := p.load()
	p.log.Info().Int("inflight", held).Int("released", released).
		Dur("budget", p.cfg.ShutdownTimeout).Msg("stopping: no new claims")
	if !p.executor.wait(time.Until(stopping.Add(p.cfg.ShutdownTimeout)), p.cancelNow) {
		// Step 2: cancel them; the executors release their rows.
		held, _ := p.load()
		cause := errShutdown
		select {
		case <-p.cancelNow:
			p.log.Info().Int("inflight", held).Msg("cancelling handlers now, as asked")
			if p.cancelCause != nil {
				cause = errors.Join(errShutdown, p.cancelCause)
			}
		default:
			p.log.Warn().Int("inflight", held).Msg("shutdown budget spent: cancelling handlers")
		}
		cancelWork(cause)
		if !p.executor.wait(cancelGrace, nil) {
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
	maint.Stop()
	controls.Stop()
	if n := len(p.snapshot()); n > 0 {
		p.log.Warn().Int("rows", n).
			Msg("stopped with outcomes unwritten (database unreachable): these rows return when their leases expire")
	}
	p.log.Info().Dur("took", time.Since(stopping).Round(time.Millisecond)).Msg("stopped")
	return nil
}

// OrderedTypes returns the types of ordered routes, and those among them
// whose dead rows block their key.
func (p *Pool) OrderedTypes() (ordered, blocking []string) {
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
// (worker.RetentionConfig.BlockingTypes).
func (p *Pool) BlockingTypes() []string {
	_, blocking := p.OrderedTypes()
	return blocking
}

// MaxAttemptsByType returns the routes whose max attempts differ from the
// pool's, for the rescuer.
func (p *Pool) MaxAttemptsByType() (types []string, max []int32) {
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

// signal sends on ch without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
