package inboxd

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
	"github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/engine"
	"github.com/inboxd/inboxd/internal/handoff"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/worker"
)

// Config is what an Inboxd runs with. Registry and DB are required; every
// other field may be left zero.
type Config struct {
	// Registry holds the handlers, by event type, and the default route.
	// It is copied, never changed: register everything before New (or
	// hand a new registry to SetRegistry).
	Registry *handlers.Registry

	// DB is the pool of the engine's own statements: claims, completions,
	// lease renewals, ingest's inserts, retention. Size it for the engine
	// alone; transactional handlers take their connections from TxDB. The
	// Inboxd never closes it.
	DB *pgxpool.Pool
	// TxDB is the pool transactional handlers take their connections from,
	// apart from DB so that handlers holding transactions open can never
	// starve the engine. Nil: Run opens one on DB's configuration with
	// Worker.TxConns connections and closes it when it returns. The
	// Inboxd never closes a pool it was given. Set it here, not in
	// Worker.TxDB.
	TxDB *pgxpool.Pool

	// Logger receives the logs; each component adds a component field. The
	// zero Logger logs nothing.
	Logger zerolog.Logger
	// Registerer receives the metrics (nil: none are registered).
	Registerer prometheus.Registerer

	// Worker configures the worker pool: handlers run at once, claims,
	// lease, attempts, backoff, shutdown budget. Zero fields take the
	// defaults documented on worker.Config.
	Worker worker.Config
	// Retention configures the deletion of expired rows. Zero fields take
	// the defaults documented on worker.RetentionConfig; dead rows that
	// block an ordered key are kept while the routes say so.
	Retention worker.RetentionConfig
	// Sources are the sources Run runs beside the workers, any number of
	// each kind (the New of ingest/kafka, ingest/amqp, ingest/nats,
	// ingest/webhook); none: rows come from other writers of the inbox
	// table. The root package links no broker client: the program links
	// those of the sources it lists.
	Sources []source.Source
	// NoHandOff keeps the sources from handing the rows they store to this
	// engine's idle handlers (the hand-off at ingest, docs/performance.md).
	// With it, every row waits for a claim, as rows written by other
	// writers do.
	NoHandOff bool

	// Outbox runs the outbox relay: the outbox table's rows (written with
	// Emit or plain SQL) are published to their brokers. Nil runs none.
	Outbox *OutboxConfig

	// Migrate applies pending schema migrations (under an advisory lock)
	// when Run starts, instead of refusing to run on an older schema.
	Migrate bool
}

// Inboxd is the inbox engine of one process. Create it with New, run it
// with Run (once), stop it by cancelling Run's context, with Stop or with
// StopAndCancel.
type Inboxd struct {
	db        *pgxpool.Pool
	log       zerolog.Logger
	migrate   bool
	pool      *engine.Pool
	retention *maintenance.Retention
	sources   []source.Running // Config.Sources, opened
	relay     *outboxRelay     // nil without the outbox

	mu        sync.Mutex
	ran       bool               // Run was called
	stopped   bool               // Stop or StopAndCancel was called
	cancelRun context.CancelFunc // ends Run's context; set while Run runs
	done      chan struct{}      // closed when Run returns

	running chan struct{} // closed once the workers listen and ingest reaches its brokers
	started atomic.Bool   // running is closed
}

// ErrStopAndCancel is the cause of the handlers' contexts that
// StopAndCancel cancels (context.Cause returns it).
var ErrStopAndCancel = errors.New("inboxd: stopped and cancelled")

// New validates cfg and returns an Inboxd ready to Run. It fails, naming
// every problem of cfg on a line of its own, before anything is started or
// registered; it does not reach the database or Kafka.
func New(cfg Config) (*Inboxd, error) {
	var errs []error
	if cfg.Registry == nil {
		errs = append(errs, errors.New("inboxd: Config.Registry is nil: register the handlers on a handlers.NewRegistry()"))
	}
	if cfg.DB == nil {
		errs = append(errs, errors.New("inboxd: Config.DB is nil: the engine needs a database pool"))
	}
	if cfg.Worker.TxDB != nil {
		errs = append(errs, errors.New("inboxd: Config.Worker.TxDB is set: give the handlers' pool as Config.TxDB"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	wcfg := cfg.Worker
	wcfg.TxDB = cfg.TxDB
	wcfg.HandOff = handsOff(cfg)
	// A dry run without metrics first: each engine part validates its
	// configuration in its constructor, and none may register a metric
	// unless all of them can be built.
	if _, err := engine.New(cfg.DB, cfg.Registry, wcfg, cfg.Logger, nil); err != nil {
		errs = append(errs, err)
	}
	if _, err := maintenance.NewRetention(cfg.DB, cfg.Retention, cfg.Logger, nil); err != nil {
		errs = append(errs, err)
	}
	for i, src := range cfg.Sources {
		if src == nil {
			errs = append(errs, fmt.Errorf("inboxd: Config.Sources[%d] is nil", i))
		} else if _, err := src.Open(source.Env{DB: cfg.DB, Logger: cfg.Logger}); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.Outbox != nil {
		if r, err := newOutboxRelay(*cfg.Outbox, cfg.DB, cfg.Logger, nil); err != nil {
			errs = append(errs, err)
		} else {
			closePublishers(r.pubs, cfg.Logger)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	ib := &Inboxd{
		db:      cfg.DB,
		log:     cfg.Logger,
		migrate: cfg.Migrate,
		done:    make(chan struct{}),
		running: make(chan struct{}),
	}
	var err error
	if ib.pool, err = engine.New(cfg.DB, cfg.Registry.Clone(), wcfg, cfg.Logger, cfg.Registerer); err != nil {
		return nil, err
	}
	rcfg := cfg.Retention
	rcfg.BlockingTypes = ib.pool.BlockingTypes // dead rows that block a key are kept, as the routes are now
	if ib.retention, err = maintenance.NewRetention(cfg.DB, rcfg, cfg.Logger, cfg.Registerer); err != nil {
		return nil, err
	}
	// The sources hand the rows they store to this engine's idle handlers
	// (internal/handoff, through source.Env), unless told not to; the pool knows it
	// (worker.Config.HandOff, set above).
	env := source.Env{DB: cfg.DB, Logger: cfg.Logger, Registerer: cfg.Registerer}
	if handsOff(cfg) {
		env.HandOff = ib.pool
	}
	for _, src := range cfg.Sources {
		r, err := src.Open(env)
		if err != nil {
			return nil, err
		}
		ib.sources = append(ib.sources, r)
	}
	if cfg.Outbox != nil {
		if ib.relay, err = newOutboxRelay(*cfg.Outbox, cfg.DB, cfg.Logger, cfg.Registerer); err != nil {
			return nil, err
		}
	}
	return ib, nil
}

// The engine's pool is the hand-off the sources take from source.Env.
var _ handoff.HandOff = (*engine.Pool)(nil)

// handsOff reports whether cfg's sources hand the rows they store to the
// engine's pool: some source is configured and NoHandOff is not set.
func handsOff(cfg Config) bool {
	return !cfg.NoHandOff && len(cfg.Sources) > 0
}

// SetRegistry replaces the handler registry (after a routes file was
// loaded again, say): rows claimed from then on are handled by reg's
// handlers; handlers already running finish as they are. reg is copied;
// nil is ignored.
func (ib *Inboxd) SetRegistry(reg *handlers.Registry) {
	if reg == nil {
		return
	}
	ib.pool.SetRegistry(reg.Clone())
}

// Run checks the schema (or migrates it, with Config.Migrate), then runs
// ingest (when configured), the worker pool with its maintenance, and
// retention until ctx ends, Stop or StopAndCancel is called, or one part
// fails. It returns nil after a stop, and the first part's error
// otherwise. Run runs once: a second call, or a call after Stop, returns an
// error at once.
//
// Once ctx ends, Run returns within worker.Config.ShutdownTimeout +
// worker.ShutdownMargin whatever the database does: running handlers get
// ShutdownTimeout to finish, then their contexts are cancelled and their
// rows released.
func (ib *Inboxd) Run(ctx context.Context) error {
	ib.mu.Lock()
	switch {
	case ib.ran:
		ib.mu.Unlock()
		return errors.New("inboxd: Run called twice: an Inboxd runs once")
	case ib.stopped:
		ib.mu.Unlock()
		return errors.New("inboxd: Run called after Stop: an Inboxd runs once")
	}
	ib.ran = true
	ctx, cancel := context.WithCancel(ctx)
	ib.cancelRun = cancel
	ib.mu.Unlock()
	defer close(ib.done)
	defer cancel()

	if err := checkSchema(ctx, ib.db, ib.migrate, ib.log); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while checking: a clean stop
		}
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := startstop.Run(gctx, ib.pool); err != nil {
			return fmt.Errorf("workers: %w", err)
		}
		return nil
	})
	g.Go(func() error { return startstop.Run(gctx, ib.retention) })
	for _, src := range ib.sources {
		g.Go(func() error { return src.Run(gctx) })
	}
	if ib.relay != nil {
		g.Go(func() error { return ib.relay.run(gctx) })
	}
	g.Go(func() error {
		if ib.waitRunning(gctx) {
			ib.started.Store(true)
			close(ib.running)
			ib.log.Info().Msg("running")
		}
		return nil
	})
	return g.Wait()
}

// waitRunning waits until the workers listen and, with ingest, the brokers
// answer; it reports false if ctx ended first.
func (ib *Inboxd) waitRunning(ctx context.Context) bool {
	select {
	case <-ib.pool.Ready():
	case <-ctx.Done():
		return false
	}
	reachable := func() bool {
		for _, src := range ib.sources {
			if !src.Reachable() {
				return false
			}
		}
		return true
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !reachable() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// Stop stops claiming and ingesting, lets running handlers finish (within
// worker.Config.ShutdownTimeout; then they are cancelled and their rows
// released), and returns once Run has returned, or with ctx's error when
// ctx ends first (the shutdown goes on). Stop before Run makes Run refuse
// to start; Stop after Run returned, or twice, returns nil.
func (ib *Inboxd) Stop(ctx context.Context) error {
	ib.mu.Lock()
	ib.stopped = true
	ran, cancel := ib.ran, ib.cancelRun
	ib.mu.Unlock()
	if !ran {
		return nil
	}
	cancel()
	select {
	case <-ib.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StopAndCancel is Stop, with the running handlers' contexts cancelled at
// once instead of after worker.Config.ShutdownTimeout (their cause wraps
// ErrStopAndCancel). A handler that then returns an error has its row
// released unattempted, as at the end of the shutdown budget: another
// worker takes it at once and its attempt is not counted; one that
// returns nil has its row processed.
func (ib *Inboxd) StopAndCancel(ctx context.Context) error {
	ib.pool.CancelRunning(ErrStopAndCancel)
	return ib.Stop(ctx)
}

// Running is closed once Run runs: the workers listen for new rows and,
// with ingest, the Kafka brokers answer.
func (ib *Inboxd) Running() <-chan struct{} { return ib.running }

// Progress returns when the workers' claim loop last went round (zero
// before it started): it does at least every worker.Config.PollInterval
// while idle. A watchdog uses it to tell a stuck engine from an idle one.
func (ib *Inboxd) Progress() time.Time { return ib.pool.Progress() }

// readyTimeout bounds Ready's database ping.
const readyTimeout = 2 * time.Second

// Ready answers a readiness probe: nil when this process does its work
// (Run is running, the database answers within two seconds, and ingest,
// when configured, is persisting batches), else an error that says which
// is not the case, fit to show in the probe's answer.
func (ib *Inboxd) Ready(ctx context.Context) error {
	if !ib.started.Load() {
		return errors.New("starting")
	}
	select {
	case <-ib.done:
		return errors.New("stopped")
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := ib.db.Ping(ctx); err != nil {
		return errors.New("database unreachable")
	}
	for _, src := range ib.sources {
		if err := src.Ready(); err != nil {
			return err
		}
	}
	if ib.relay != nil && !ib.relay.Ready() {
		return errors.New("outbox relay not ready (cannot renew its shard leases in the database)")
	}
	return nil
}

// Healthy answers a liveness probe: it fails only when restarting the
// process would help, that is when ingest's Kafka fetch loop is stuck. A
// database outage is not a liveness failure.
func (ib *Inboxd) Healthy() error {
	for _, src := range ib.sources {
		if err := src.Healthy(); err != nil {
			return err
		}
	}
	return nil
}
