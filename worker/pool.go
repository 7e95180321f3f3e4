package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/handlers"
)

// Pool claims inbox rows and runs their handlers. Create it with New and
// start it with Run; a Pool runs once.
type Pool struct {
	cfg      Config
	db       *pgxpool.Pool
	registry *handlers.Registry
	log      zerolog.Logger
	metrics  *metrics

	// wake is signalled (without blocking) when rows may be available: a
	// notification arrived, or a claim came back full.
	wake chan struct{}
	// freed is signalled when a claimed row is done with, making room for
	// another.
	freed chan struct{}
	// queue holds claimed rows waiting for an executor; its capacity is the
	// most rows the pool holds (Workers + Prefetch), so sends never block.
	queue chan *job
	// results carries handler outcomes to the completer; resultsMu guards
	// its closing against late senders (handlers that ignored cancellation).
	results       chan result
	resultsMu     sync.RWMutex
	resultsClosed bool

	mu       sync.Mutex
	inflight map[int64]*job // claimed rows, queued or running
	handlers sync.WaitGroup // the executors

	runOnce sync.Once
	ready   chan struct{}
}

// job is one claimed row being handled.
type job struct {
	ctx        context.Context // the handler's; cancelled on lease loss or shutdown
	row        claimedRow
	token      int64
	cancel     context.CancelCauseFunc
	leaseUntil time.Time
}

// result is the outcome of one job, for the completer.
type result struct {
	id        int64
	token     int64
	eventID   string
	eventType string
	status    string // processed, received or dead
	delay     time.Duration
	lastError *string
	release   bool // returned unattempted at shutdown: do not count the attempt
	outcome   string
}

var (
	errShutdown  = errors.New("worker shutting down")
	errLeaseLost = errors.New("lease lost: the row was rescued or claimed by another worker")
)

// New returns a Pool that runs handlers from registry on rows of the inbox
// table reachable through db. Metrics are registered on reg (nil: none).
func New(db *pgxpool.Pool, registry *handlers.Registry, cfg Config, logger zerolog.Logger, reg prometheus.Registerer) (*Pool, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	if registry == nil {
		return nil, errors.New("worker: nil handler registry")
	}
	return &Pool{
		cfg:      cfg,
		db:       db,
		registry: registry,
		log:      logger.With().Str("component", "worker").Str("worker_id", cfg.ID).Logger(),
		metrics:  newMetrics(reg),
		wake:     make(chan struct{}, 1),
		freed:    make(chan struct{}, 1),
		queue:    make(chan *job, cfg.capacity()),
		results:  make(chan result, cfg.capacity()),
		inflight: make(map[int64]*job),
		ready:    make(chan struct{}),
	}, nil
}

// Ready is closed once Run has started listening for notifications (or
// given up on listening and fallen back to polling).
func (p *Pool) Ready() <-chan struct{} { return p.ready }

// Run claims and handles rows until ctx is cancelled, then shuts down in two
// steps: it stops claiming and waits up to ShutdownTimeout for in-flight
// handlers, then cancels the rest and releases their rows so other workers
// take them at once. Final row states are written even though ctx is done.
// Run returns nil after a clean shutdown.
func (p *Pool) Run(ctx context.Context) error {
	started := false
	p.runOnce.Do(func() { started = true })
	if !started {
		return errors.New("worker: pool already ran")
	}

	// Handlers run under workCtx, which outlives ctx by the shutdown budget.
	workCtx, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelWork(errShutdown)

	bg, bgCtx := errgroup.WithContext(ctx)
	bg.Go(func() error { p.listen(bgCtx); return nil })
	bg.Go(func() error { p.rescueLoop(bgCtx); return nil })
	bg.Go(func() error { p.statsLoop(bgCtx); return nil })

	renewCtx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	renewDone := make(chan struct{})
	go func() { defer close(renewDone); p.renewLoop(renewCtx) }()

	var completers sync.WaitGroup
	for range numCompleters {
		completers.Add(1)
		go func() { defer completers.Done(); p.completeLoop(context.WithoutCancel(ctx)) }()
	}
	for range p.cfg.Workers {
		p.handlers.Add(1)
		go func() {
			defer p.handlers.Done()
			for j := range p.queue {
				p.execute(j)
			}
		}()
	}

	p.claimLoop(ctx, workCtx)

	// Rows claimed but not started go back at once; then, step 1: let the
	// running handlers finish within the budget.
	released := p.releaseQueued()
	close(p.queue)
	p.log.Info().Int("inflight", p.inflightCount()).Int("released", released).
		Dur("budget", p.cfg.ShutdownTimeout).Msg("stopping: no new claims")
	if !p.waitHandlers(p.cfg.ShutdownTimeout) {
		// Step 2: cancel them; their rows are released by the executor.
		p.log.Warn().Int("inflight", p.inflightCount()).Msg("shutdown budget spent: cancelling handlers")
		cancelWork(errShutdown)
		if !p.waitHandlers(5 * time.Second) {
			p.log.Error().Int("inflight", p.inflightCount()).Msg("handlers ignore cancellation: releasing their rows anyway")
			p.releaseStuck()
		}
	}
	stopRenew()
	<-renewDone
	p.closeResults()
	completers.Wait()
	_ = bg.Wait()
	p.log.Info().Msg("stopped")
	return nil
}

// claimLoop claims rows while ctx is live and queues them for the
// executors. The pool holds up to Workers + Prefetch rows: the executors'
// and a queue that keeps them busy while the next claim runs. Under a
// backlog it claims once half the room is free, so every statement takes a
// large batch; after a notification or a poll tick any room is worth a
// claim.
func (p *Pool) claimLoop(ctx, workCtx context.Context) {
	poll := time.NewTicker(p.cfg.PollInterval)
	defer poll.Stop()
	capacity := p.cfg.capacity()
	batchMin := max(1, min(capacity/2, p.cfg.ClaimBatch))
	pending, urgent := true, true
	errDelay := 100 * time.Millisecond
	for {
		if ctx.Err() != nil {
			return
		}
		free := capacity - p.inflightCount()
		if pending && (free >= batchMin || (urgent && free > 0)) {
			n := min(free, p.cfg.ClaimBatch)
			got, err := p.claim(ctx, workCtx, n)
			if err != nil {
				p.metrics.dbErrors.WithLabelValues("claim").Inc()
				p.log.Error().Err(err).Dur("retry_in", errDelay).Msg("claim failed")
				if !sleepCtx(ctx, errDelay) {
					return
				}
				errDelay = min(errDelay*2, 5*time.Second)
				continue
			}
			errDelay = 100 * time.Millisecond
			pending, urgent = got == n, false
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
		}
	}
}

// sleepCtx waits for d or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// claim takes up to n due rows and queues them for the executors. It
// returns how many rows it claimed.
func (p *Pool) claim(ctx, workCtx context.Context, n int) (int, error) {
	token := rand.Int64()
	// A claim is not cancelled half-way by shutdown: had the UPDATE committed
	// with its result lost, its rows would sit in processing until their
	// leases expired. Claimed rows are handled (and drained) normally.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(p.cfg.Lease/2, time.Second))
	defer cancel()
	rows, err := p.db.Query(ctx, claimSQL, n, token, p.cfg.Lease.Milliseconds(), p.cfg.ID)
	if err != nil {
		return 0, fmt.Errorf("claim batch: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[claimedRow])
	if err != nil {
		return 0, fmt.Errorf("claim batch: %w", err)
	}
	p.metrics.claims.Inc()
	p.metrics.claimed.Add(float64(len(claimed)))
	now := p.cfg.Now()
	for i := range claimed {
		jctx, cancel := context.WithCancelCause(workCtx)
		j := &job{ctx: jctx, row: claimed[i], token: token, cancel: cancel, leaseUntil: now.Add(p.cfg.Lease)}
		p.mu.Lock()
		p.inflight[j.row.ID] = j
		p.mu.Unlock()
		p.queue <- j
	}
	p.metrics.inflight.Set(float64(p.inflightCount()))
	return len(claimed), nil
}

func (p *Pool) inflightCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inflight)
}

// finish removes j from the in-flight set and frees its slot.
func (p *Pool) finish(j *job) bool {
	p.mu.Lock()
	cur, ok := p.inflight[j.row.ID]
	mine := ok && cur == j
	if mine {
		delete(p.inflight, j.row.ID)
	}
	n := len(p.inflight)
	p.mu.Unlock()
	p.metrics.inflight.Set(float64(n))
	signal(p.freed)
	return mine
}

// waitHandlers waits up to d for every handler to return.
func (p *Pool) waitHandlers(d time.Duration) bool {
	done := make(chan struct{})
	go func() { p.handlers.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// releaseQueued releases the rows still waiting in the queue (claimed, no
// handler started) and reports how many. An executor may take one
// concurrently; each row is either run or released, never both.
func (p *Pool) releaseQueued() int {
	n := 0
	for {
		select {
		case j := <-p.queue:
			if p.finish(j) {
				p.submit(p.releaseResult(j))
				n++
			}
		default:
			return n
		}
	}
}

// releaseStuck releases the rows of handlers that did not return after
// cancellation. Their eventual completions will be fenced.
func (p *Pool) releaseStuck() {
	p.mu.Lock()
	stuck := make([]*job, 0, len(p.inflight))
	for _, j := range p.inflight {
		stuck = append(stuck, j)
	}
	p.mu.Unlock()
	for _, j := range stuck {
		if p.finish(j) {
			p.submit(p.releaseResult(j))
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

// submit hands r to the completer. After shutdown it drops r: the row's
// lease expires and the rescuer returns it.
func (p *Pool) submit(r result) {
	p.resultsMu.RLock()
	defer p.resultsMu.RUnlock()
	if p.resultsClosed {
		return
	}
	p.results <- r
}

func (p *Pool) closeResults() {
	p.resultsMu.Lock()
	defer p.resultsMu.Unlock()
	p.resultsClosed = true
	close(p.results)
}
