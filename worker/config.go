package worker

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures a Pool. Zero values take the defaults documented on
// each field.
type Config struct {
	// Workers is the number of handlers run concurrently (default 64).
	Workers int
	// ClaimBatch caps the rows one claim statement takes (default 500).
	ClaimBatch int
	// ClaimBytes caps the bytes (payloads, keys and headers) of the rows the
	// pool holds claimed and not yet handled, running or waiting (default 32 MiB). A
	// row bigger than the whole budget is still claimed, alone.
	ClaimBytes int64
	// Prefetch is how many claimed rows may wait for a free handler, so
	// claims are large and handlers never wait for one (negative: none).
	// 0, the default, adapts it to the handlers: min(ClaimBatch, 4·Workers)
	// to begin with, growing for a route whose handlers finish fast to
	// about prefetchHorizon of its work, up to 2·ClaimBatch (fast handlers
	// then get full claims, and a replica never holds more waiting rows
	// than it works off in that time). Waiting rows hold their lease
	// (renewed like running ones); at shutdown they are released at once.
	Prefetch int
	// MaxAttempts is the number of attempts before a failing row goes dead
	// (default 10).
	MaxAttempts int
	// Lease is how long a claimed row belongs to this worker without renewal
	// (default 30s). Leases are renewed while a row is held: waiting,
	// running, or finished with its outcome not yet written.
	Lease time.Duration
	// StatementTimeout bounds each of the engine's statements: claims,
	// outcome writes, rescues (default 30s). Lease renewals are bounded by
	// the lease instead: a renewal that takes longer is useless.
	StatementTimeout time.Duration
	// RetryPolicy spaces the attempts (default ExponentialBackoff from 1s to
	// 5m).
	RetryPolicy RetryPolicy
	// MaxRetryDelay caps delays that handlers ask for with
	// handlers.RetryAfter (default 5m).
	MaxRetryDelay time.Duration
	// PollInterval is the fallback polling period (default 500ms).
	PollInterval time.Duration
	// RescueInterval is how often expired leases are looked for (default
	// Lease/2, between 1s and 30s).
	RescueInterval time.Duration
	// StatsInterval is how often the inbox gauges are refreshed (default
	// 15s).
	StatsInterval time.Duration
	// StaleAfter is the age by received_at past which a received row counts
	// as stale in the inboxd_inbox_stale_rows gauge (default 5m).
	StaleAfter time.Duration
	// ShutdownTimeout is how long in-flight handlers may run after Run's
	// context is cancelled before they are cancelled too (default 20s). Run
	// returns within ShutdownTimeout + ShutdownMargin.
	ShutdownTimeout time.Duration
	// TxDB is the pool transactional handlers take their connections from,
	// apart from the engine's own, so that handlers holding transactions
	// open can never starve claims, renewals and completions. Nil: Run
	// opens one on the engine pool's configuration with TxConns
	// connections, and closes it when it returns.
	TxDB *pgxpool.Pool
	// TxConns is the size of the pool Run opens when TxDB is nil (default
	// max(2, Workers/4)). Transactional handlers beyond it wait for a
	// connection; their leases are renewed meanwhile.
	TxConns int
	// ID names this worker in the locked_by column (default host-pid).
	ID string

	adaptivePrefetch bool // Prefetch was left to the pool (set by withDefaults)
}

// ShutdownMargin is how long Run may take, beyond Config.ShutdownTimeout,
// to cancel handlers that overran the budget and write the final row states.
// Run returns within ShutdownTimeout + ShutdownMargin of its context's
// cancellation, whatever the database does: its own last writes end
// ShutdownReserve earlier, so that a process that exits when Run returns
// is gone by that bound too.
const ShutdownMargin = 5 * time.Second

// ShutdownReserve is the part of ShutdownMargin left, at the end, for what
// comes after Run returns (closing pools, the process's exit).
const ShutdownReserve = time.Second

// cancelGrace is how long cancelled handlers get to return at shutdown
// before their rows are released anyway; the rest of ShutdownMargin is for
// writing outcomes.
const cancelGrace = 2 * time.Second

func (c Config) withDefaults() Config {
	if c.Workers == 0 {
		c.Workers = 64
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = 500
	}
	if c.ClaimBytes == 0 {
		c.ClaimBytes = 32 << 20
	}
	switch {
	case c.Prefetch == 0:
		c.Prefetch = min(c.ClaimBatch, 4*c.Workers)
		c.adaptivePrefetch = true
	case c.Prefetch < 0:
		c.Prefetch = 0
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = 30 * time.Second
	}
	if c.RetryPolicy == nil {
		c.RetryPolicy = ExponentialBackoff{Base: time.Second, Max: 5 * time.Minute}
	}
	if c.MaxRetryDelay == 0 {
		c.MaxRetryDelay = 5 * time.Minute
	}
	if c.PollInterval == 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.RescueInterval == 0 {
		c.RescueInterval = c.defaultRescueInterval()
	}
	if c.StatsInterval == 0 {
		c.StatsInterval = 15 * time.Second
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 5 * time.Minute
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 20 * time.Second
	}
	if c.TxConns == 0 {
		c.TxConns = max(2, c.Workers/4)
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers must be at least 1, got %d", c.Workers))
	}
	if c.ClaimBatch < 1 {
		errs = append(errs, fmt.Errorf("claim batch must be at least 1, got %d", c.ClaimBatch))
	}
	if c.ClaimBytes < 1 {
		errs = append(errs, fmt.Errorf("claim bytes must be at least 1, got %d", c.ClaimBytes))
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > maxAttemptsBound {
		errs = append(errs, fmt.Errorf("max attempts must be between 1 and %d, got %d", maxAttemptsBound, c.MaxAttempts))
	}
	if c.Lease < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("lease must be at least 100ms, got %s", c.Lease))
	}
	if c.StatementTimeout <= 0 {
		errs = append(errs, fmt.Errorf("statement timeout must be positive, got %s", c.StatementTimeout))
	}
	if c.PollInterval <= 0 || c.RescueInterval <= 0 || c.StatsInterval <= 0 {
		errs = append(errs, errors.New("poll, rescue and stats intervals must be positive"))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("shutdown timeout must not be negative, got %s", c.ShutdownTimeout))
	}
	if c.TxConns < 1 {
		errs = append(errs, fmt.Errorf("tx conns must be at least 1, got %d", c.TxConns))
	}
	return errors.Join(errs...)
}

// maxAttemptsBound is the schema's bound on the attempts column.
const maxAttemptsBound = 1000000

// maxCapacity is the most rows a route of the default concurrency holds
// at once, running and waiting (its prefetch at its largest).
func (c Config) maxCapacity() int {
	if c.adaptivePrefetch {
		return c.Workers + max(c.Prefetch, 2*c.ClaimBatch)
	}
	return c.Workers + c.Prefetch
}
