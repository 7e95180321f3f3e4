package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/clock"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/worker"
)

// Pool claims inbox rows and runs their handlers. Create it with New,
// start it with Start and stop it with Stop (or the end of Start's
// context); a Pool runs once.
//
// A Pool is the thin owner of the engine's components (see the package
// documentation), which it wires, starts and stops, and of the
// books they share (books.go): the jobs, the routes, and the one
// transition of a job's state (books.moveLocked).
type Pool struct {
	startstop.Base
	archetype               // its settings, logger, metrics and clock, shared by the components
	db        *pgxpool.Pool // the engine's own statements
	reg       *registryRef

	books     *books     // the rows held, under their lock
	rel       *releaser  // gives rows back unattempted
	claimer   *claimer   // claims rows and queues them
	executor  *executor  // runs the handlers of the dispatched jobs
	completer *completer // writes the outcomes
	leaser    *leaser    // renews the leases, writes the start marks
	handOff   *handOff   // takes rows from the ingest of this process
	listener  *listener  // wakes the claims on the inbox's notifications

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
	attempt   int // the attempt's number (0: not an attempt, as a release)
}

var (
	errShutdown  = errors.New("worker shutting down")
	errLeaseLost = errors.New("lease lost: the row was rescued or claimed by another worker")
)

// New returns a Pool that runs handlers from registry on rows of the inbox
// table reachable through db, which carries the engine's own statements.
// Metrics are registered on reg (nil: none); opts change the settings
// beyond cfg.
func New(db *pgxpool.Pool, registry *handlers.Registry, cfg worker.Config, logger zerolog.Logger, reg prometheus.Registerer, opts ...Option) (*Pool, error) {
	set, err := newSettings(cfg)
	if err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	for _, o := range opts {
		o(&set)
	}
	if db == nil {
		return nil, errors.New("worker: nil database pool")
	}
	if registry == nil {
		return nil, errors.New("worker: nil handler registry")
	}
	a := archetype{
		cfg:     set,
		log:     logger.With().Str("component", "worker").Str("worker_id", set.ID).Logger(),
		metrics: newMetrics(reg),
		clock:   &clock.Clock{},
	}
	p := &Pool{archetype: a, db: db, reg: &registryRef{}, books: newBooks(a), cancelNow: make(chan struct{})}
	p.reg.store(registry)
	// The components, each on what it needs of the books and of the
	// others; the books start jobs through the executor, write start
	// marks ahead through the leaser and give rows back through the
	// releaser.
	p.claimer = newClaimer(a, p.books, db)
	p.completer = newCompleter(a, p.books, db, p.claimer.signalWake)
	p.rel = &releaser{out: p.completer, reg: p.reg, metrics: a.metrics, log: a.log}
	p.leaser = newLeaser(a, p.books, db, p.rel)
	p.executor = newExecutor(a, p.books, p.leaser, p.completer, p.rel, p.reg)
	p.handOff = &handOff{archetype: a, b: p.books, db: db, rel: p.rel}
	p.listener = newListener(db, p.claimer.signalWake, a.log, a.metrics)
	p.books.run, p.books.marks, p.books.give = p.executor, p.leaser, p.rel
	p.books.routes.wake = p.claimer.signalWake
	p.books.routes.syncLocked(registry, p.books.jobs) // nothing runs yet
	return p, nil
}

// Progress returns when the claim loop last went round: it does at least
// every PollInterval while idle, and after each claim (bounded by
// StatementTimeout) or failed claim's backoff. A watchdog uses it to tell a
// stuck daemon from an idle one. Zero before the claim loop started.
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
	p.reg.store(r)
	p.books.syncRoutes(r)
	p.claimer.signalWake() // limits may have grown
}

// Ready is closed once the started pool listens for notifications (or
// gave up on listening and fell back to polling).
func (p *Pool) Ready() <-chan struct{} { return p.listener.ready }

// CancelRunning cuts the first step of the shutdown short: once the pool
// is told to stop (before or after this call), the running handlers'
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

// Start opens the pool's own sessions (claims, start marks, and the
// transactional handlers' unless Config.TxDB is set), starts its
// components and returns: the pool claims and handles rows until Stop or
// the end of ctx, then shuts down in two steps: it stops claiming, gives
// rows that wait for a handler back at once, and waits up to
// ShutdownTimeout for running handlers; then it cancels the rest and
// releases their rows so other workers take them at once. Final row
// states are written even though ctx is done. Stop returns once the
// shutdown is over: within ShutdownTimeout + worker.ShutdownMargin of
// ctx's end (or of Stop), whatever the database does. Start fails only if
// a session pool cannot be opened (nothing is started then), or with
// startstop.ErrStarted: a Pool runs once (the start/stop contract of
// internal/startstop).
func (p *Pool) Start(ctx context.Context) error {
	return p.StartWith(ctx, func(ctx context.Context) error {
		dbs, err := p.openSessions(ctx)
		if err != nil {
			return err
		}
		p.Go(func() {
			defer dbs.close()
			p.run(ctx)
		})
		return nil
	})
}

// sessions are the connection pools a running Pool opens for itself.
type sessions struct{ claims, marks, tx *pgxpool.Pool } // tx: nil when Config.TxDB is set

// close closes them.
func (s sessions) close() {
	for _, db := range []*pgxpool.Pool{s.claims, s.marks, s.tx} {
		if db != nil {
			db.Close()
		}
	}
}

// openSessions opens the claims', the start marks' and (unless
// Config.TxDB is set) the transactional handlers' pools, and hands them
// to the components.
func (p *Pool) openSessions(ctx context.Context) (dbs sessions, err error) {
	defer func() {
		if err != nil {
			dbs.close()
		}
	}()
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
	if dbs.claims, err = pgxpool.NewWithConfig(ctx, cc); err != nil {
		return dbs, fmt.Errorf("worker: open the claims' pool: %w", err)
	}
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
	if dbs.marks, err = pgxpool.NewWithConfig(ctx, mc); err != nil {
		return dbs, fmt.Errorf("worker: open the start marks' pool: %w", err)
	}
	txdb := p.cfg.TxDB
	if txdb == nil {
		pc := p.db.Config().Copy()
		pc.MaxConns = int32(p.cfg.TxConns)
		pc.MinConns = 0
		if dbs.tx, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
			return dbs, fmt.Errorf("worker: open the transactional handlers' pool: %w", err)
		}
		txdb = dbs.tx
	}
	p.claimer.claimDB, p.leaser.markDB, p.executor.txdb = dbs.claims, dbs.marks, txdb
	return dbs, nil
}

// run runs the pool until ctx ends, and then its shutdown.
func (p *Pool) run(ctx context.Context) {
	defer p.executor.quitIdle()

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
		for _, j := range p.books.snapshot() {
			j.cancel(cause)
		}
	}
	defer cancelWork(errShutdown)

	// The listener, the maintenance services and the route controls run
	// until ctx ends; their Starts fail only if they ran before, which
	// these new ones did not.
	_ = p.listener.Start(ctx)
	maint := newMaintenance(p)
	_ = maint.Start(ctx)
	// The route controls (controls.go): pauses and rate overrides are read
	// once before the first claim, so that a route paused (or slowed)
	// while no replica ran is not claimed at start, then every half second.
	controls := maintenance.NewControlsReader(p.db, p.books.routes, p.claimer.signalWake, p.cfg.Config, p.log, p.metrics.maintenance)
	controls.Round(ctx)
	_ = controls.Start(ctx)

	// The components (service.go): the leaser and the completer run until
	// the last outcome is written (or the hard deadline), the claimer
	// until ctx ends; the executor's goroutines start with the jobs.
	// Their Starts fail only before launching anything, which these do not.
	p.executor.stopCtx = stop
	work := context.WithoutCancel(workCtx)
	p.claimer.stopCtx, p.claimer.work, p.handOff.work = stop, work, work
	_ = p.leaser.Start(stop)
	_ = p.completer.Start(stop)
	_ = p.claimer.Start(ctx)
	p.books.accept() // rows handed off at ingest (handoff.go) run from now on
	<-ctx.Done()
	p.claimer.Stop()

	// Rows claimed but not started go back at once; then, step 1: let the
	// running handlers finish within the budget.
	stopping := p.clock.Now()
	released := p.releaseQueued()
	held, _ := p.books.load()
	p.log.Info().Int("inflight", held).Int("released", released).
		Dur("budget", p.cfg.ShutdownTimeout).Msg("stopping: no new claims")
	if !p.executor.wait(p.clock.Until(stopping.Add(p.cfg.ShutdownTimeout)), p.cancelNow) {
		// Step 2: cancel them; the executors release their rows.
		held, _ := p.books.load()
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
			held, _ := p.books.load()
			p.log.Error().Int("inflight", held).Msg("handlers ignore cancellation: releasing their rows anyway")
			p.releaseStuck()
		}
	}
	// Outcomes still waiting are written (retrying until the hard
	// deadline), with their leases renewed meanwhile.
	p.completer.Stop()
	p.leaser.Stop()
	p.listener.Stop()
	maint.Stop()
	controls.Stop()
	if n := len(p.books.snapshot()); n > 0 {
		p.log.Warn().Int("rows", n).
			Msg("stopped with outcomes unwritten (database unreachable): these rows return when their leases expire")
	}
	p.log.Info().Dur("took", p.clock.Since(stopping).Round(time.Millisecond)).Msg("stopped")
}

// BlockingTypes returns the event types of the pool's routes whose dead
// rows hold their key back (ordered, on_dead: block), as its routes are
// now (a reload changes them): retention keeps those dead rows
// (worker.RetentionConfig.BlockingTypes).
func (p *Pool) BlockingTypes() []string { return p.books.routes.BlockingTypes() }

// Reserve offers rows, about to be inserted by ingest in one statement,
// to this pool's idle handlers (handoff.HandOff; handoff.go). It returns
// the reservation the insert writes (driver.InsertBatch), marking the rows
// taken, or nil when it takes none. Every non-nil reservation must end
// with Deliver or Cancel.
func (p *Pool) Reserve(rows []driver.NewRow) *driver.Reservation { return p.handOff.reserve(rows) }

// Deliver hands over the reserved rows that the insert of rows with r
// committed (got, from driver.InsertBatch): each runs at once on an idle
// handler; the room of the others (duplicates) is given back. ctx bounds
// the write that gives them back unstarted should the pool have begun to
// stop since Reserve.
func (p *Pool) Deliver(ctx context.Context, r *driver.Reservation, rows []driver.NewRow, got []driver.Reserved) {
	p.handOff.deliver(ctx, r, rows, got)
}

// Cancel gives back the room of a reservation whose insert failed: none of
// its rows is handed off.
func (p *Pool) Cancel(r *driver.Reservation) { p.handOff.cancel(r) }

// releaseQueued stops handlers from starting and releases the rows still
// waiting in the routes' queues (claimed, no handler started); it reports
// how many.
func (p *Pool) releaseQueued() int {
	n := 0
	for _, j := range p.books.stopQueued() {
		if p.books.abandon(j) {
			p.rel.release(j, "released unstarted at worker shutdown")
			n++
		}
	}
	return n
}

// releaseStuck releases the rows of handlers that did not return after
// cancellation. Their eventual completions will be fenced.
func (p *Pool) releaseStuck() {
	for _, j := range p.books.snapshot() {
		if p.books.abandon(j) {
			p.rel.release(j, "released unfinished at worker shutdown")
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
