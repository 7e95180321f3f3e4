package worker

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/lease"
)

// Defaults of the Config fields left zero (Config.WithDefaults). They are
// the one source of these defaults: the daemon's INBOXD_* variables take
// theirs from them (package config).
const (
	// DefaultWorkers is the default Config.Workers.
	DefaultWorkers = 64
	// DefaultClaimBatch is the default Config.ClaimBatch.
	DefaultClaimBatch = 500
	// DefaultClaimBytes is the default Config.ClaimBytes: 32 MiB.
	DefaultClaimBytes int64 = 32 << 20
	// DefaultMaxAttempts is the default Config.MaxAttempts.
	DefaultMaxAttempts = 10
	// DefaultLease is the default Config.Lease.
	DefaultLease = 30 * time.Second
	// DefaultStatementTimeout is the default Config.StatementTimeout and
	// RetentionConfig.StatementTimeout.
	DefaultStatementTimeout = 30 * time.Second
	// DefaultBackoffBase is the Base of the default Config.RetryPolicy.
	DefaultBackoffBase = time.Second
	// DefaultBackoffMax is the Max of the default Config.RetryPolicy, and
	// the default Config.MaxRetryDelay.
	DefaultBackoffMax = 5 * time.Minute
	// DefaultPollInterval is the default Config.PollInterval.
	DefaultPollInterval = 500 * time.Millisecond
	// DefaultStatsInterval is the default Config.StatsInterval.
	DefaultStatsInterval = 15 * time.Second
	// DefaultStaleAfter is the default Config.StaleAfter.
	DefaultStaleAfter = 5 * time.Minute
	// DefaultShutdownTimeout is the default Config.ShutdownTimeout.
	DefaultShutdownTimeout = 20 * time.Second
	// DefaultRetention is the default RetentionConfig.Processed: a week.
	DefaultRetention = 168 * time.Hour
	// DefaultRetentionInterval is the default RetentionConfig.Interval.
	DefaultRetentionInterval = time.Minute
)

// Config configures the engine's worker pool (inboxd.Config.Worker). Zero
// values take the defaults documented on each field (the Default*
// constants).
type Config struct {
	// Workers is the number of handlers run concurrently (default
	// DefaultWorkers, at most handlers.MaxConcurrency).
	Workers int
	// ClaimBatch caps the rows one claim statement takes (default
	// DefaultClaimBatch, at most MaxClaimBatch).
	ClaimBatch int
	// ClaimBytes caps the bytes (payloads, keys and headers) of the rows the
	// pool holds claimed and not yet handled, running or waiting (default
	// DefaultClaimBytes, between MinClaimBytes and MaxClaimBytes). A row bigger than the whole budget is still
	// claimed, alone.
	ClaimBytes int64
	// Prefetch is how many claimed rows may wait for a free handler, so
	// claims are large and handlers never wait for one (negative: none).
	// 0, the default, adapts it to the handlers: min(ClaimBatch, 4·Workers)
	// to begin with, growing for a route whose handlers finish fast to
	// about 250ms of its work, up to 2·ClaimBatch (fast handlers
	// then get full claims, and a replica never holds more waiting rows
	// than it works off in that time). Waiting rows hold their lease
	// (renewed like running ones); at shutdown they are released at once.
	// At most MaxPrefetch.
	Prefetch int
	// MaxAttempts is the number of attempts before a failing row goes dead
	// (default DefaultMaxAttempts, at most handlers.MaxAttemptsLimit).
	MaxAttempts int
	// Lease is how long a claimed row belongs to this worker without renewal
	// (default DefaultLease, at least MinLease). Leases are renewed while a
	// row is held: waiting, running, or finished with its outcome not yet
	// written.
	Lease time.Duration
	// StatementTimeout bounds each of the engine's statements: claims,
	// outcome writes, rescues (default DefaultStatementTimeout). Lease
	// renewals are bounded by the lease instead: a renewal that takes
	// longer is useless.
	StatementTimeout time.Duration
	// RetryPolicy spaces the attempts (default ExponentialBackoff from
	// DefaultBackoffBase to DefaultBackoffMax).
	RetryPolicy RetryPolicy
	// MaxRetryDelay caps delays that handlers ask for with
	// handlers.RetryAfter (default DefaultBackoffMax).
	MaxRetryDelay time.Duration
	// PollInterval is the fallback polling period (default
	// DefaultPollInterval, between MinPollInterval and MaxPollInterval).
	PollInterval time.Duration
	// RescueInterval is how often expired leases are looked for (default
	// Lease/2, between 1s and 30s).
	RescueInterval time.Duration
	// StatsInterval is how often the inbox gauges are refreshed (default
	// DefaultStatsInterval, at least MinStatsInterval).
	StatsInterval time.Duration
	// StaleAfter is the age by received_at past which a received row counts
	// as stale in the inboxd_inbox_stale_rows gauge (default
	// DefaultStaleAfter, at least MinStaleAfter).
	StaleAfter time.Duration
	// ShutdownTimeout is how long in-flight handlers may run after the
	// engine is told to stop (inboxd.Inboxd.Run's context cancelled, or
	// Stop) before they are cancelled too (default DefaultShutdownTimeout).
	// The pool stops within ShutdownTimeout + ShutdownMargin.
	ShutdownTimeout time.Duration
	// TxDB is the pool transactional handlers take their connections from,
	// apart from the engine's own, so that handlers holding transactions
	// open can never starve claims, renewals and completions. Nil: the
	// pool opens one at start on the engine pool's configuration with
	// TxConns connections, and closes it when it stops.
	TxDB *pgxpool.Pool
	// HandOff says that the ingest of this process hands rows to the pool
	// as it stores them (the hand-off at ingest; inboxd.New sets it when a
	// source does). Claims then take at most half of the byte budget left
	// (ClaimBytes less the bytes held), and the hand-off never takes the
	// half a claim in flight may fill: the bytes held stay within
	// ClaimBytes whichever path brought the rows.
	HandOff bool
	// TxConns is the size of the pool opened at start when TxDB is nil (default
	// max(2, Workers/4)). Transactional handlers beyond it wait for a
	// connection; their leases are renewed meanwhile.
	TxConns int
	// ID names this worker in the locked_by column (default host-pid).
	ID string
}

// ShutdownMargin is how long the pool may take to stop, beyond
// Config.ShutdownTimeout, to cancel handlers that overran the budget and
// write the final row states. It stops within ShutdownTimeout +
// ShutdownMargin of being told to, whatever the database does: its own
// last writes end ShutdownReserve earlier, so that a process that exits
// once it stopped is gone by that bound too.
const ShutdownMargin = 5 * time.Second

// ShutdownReserve is the part of ShutdownMargin left, at the end, for what
// comes after the pool stopped (closing pools, the process's exit).
const ShutdownReserve = time.Second

// WithDefaults returns c with every zero field set to its default, as the
// engine applies them: what a pool made from c runs with. Prefetch is kept
// as it is: 0 (adaptive) and negative (none) are what the pool runs with.
func (c Config) WithDefaults() Config { return c.withDefaults() }

// Validate reports every setting of c, with its defaults (WithDefaults),
// that is out of its bounds: one error per setting, joined. The engine
// refuses to start on such a Config.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) withDefaults() Config {
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = DefaultClaimBatch
	}
	if c.ClaimBytes == 0 {
		c.ClaimBytes = DefaultClaimBytes
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = DefaultStatementTimeout
	}
	if c.RetryPolicy == nil {
		c.RetryPolicy = ExponentialBackoff{Base: DefaultBackoffBase, Max: DefaultBackoffMax}
	}
	if c.MaxRetryDelay == 0 {
		c.MaxRetryDelay = DefaultBackoffMax
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.RescueInterval == 0 {
		c.RescueInterval = lease.RescueInterval(c.Lease)
	}
	if c.StatsInterval == 0 {
		c.StatsInterval = DefaultStatsInterval
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
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
	if c.Workers < 1 || c.Workers > handlers.MaxConcurrency {
		errs = append(errs, fmt.Errorf("workers must be between 1 and %d, got %d", handlers.MaxConcurrency, c.Workers))
	}
	if c.ClaimBatch < 1 || c.ClaimBatch > MaxClaimBatch {
		errs = append(errs, fmt.Errorf("claim batch must be between 1 and %d, got %d", MaxClaimBatch, c.ClaimBatch))
	}
	if c.ClaimBytes < MinClaimBytes || c.ClaimBytes > MaxClaimBytes {
		errs = append(errs, fmt.Errorf("claim bytes must be between %d and %d, got %d", MinClaimBytes, MaxClaimBytes, c.ClaimBytes))
	}
	if c.Prefetch > MaxPrefetch {
		errs = append(errs, fmt.Errorf("prefetch must be at most %d, got %d", MaxPrefetch, c.Prefetch))
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > handlers.MaxAttemptsLimit {
		errs = append(errs, fmt.Errorf("max attempts must be between 1 and %d, got %d", handlers.MaxAttemptsLimit, c.MaxAttempts))
	}
	if c.Lease < MinLease {
		errs = append(errs, fmt.Errorf("lease must be at least %s, got %s", MinLease, c.Lease))
	}
	if c.StatementTimeout < MinStatementTimeout {
		errs = append(errs, fmt.Errorf("statement timeout must be at least %s, got %s", MinStatementTimeout, c.StatementTimeout))
	}
	if c.PollInterval < MinPollInterval || c.PollInterval > MaxPollInterval {
		errs = append(errs, fmt.Errorf("poll interval must be between %s and %s, got %s", MinPollInterval, MaxPollInterval, c.PollInterval))
	}
	if c.StatsInterval < MinStatsInterval {
		errs = append(errs, fmt.Errorf("stats interval must be at least %s, got %s", MinStatsInterval, c.StatsInterval))
	}
	if c.RescueInterval <= 0 {
		errs = append(errs, errors.New("rescue interval must be positive"))
	}
	if c.StaleAfter < MinStaleAfter {
		errs = append(errs, fmt.Errorf("stale after must be at least %s, got %s", MinStaleAfter, c.StaleAfter))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("shutdown timeout must not be negative, got %s", c.ShutdownTimeout))
	}
	if c.TxConns < 1 {
		errs = append(errs, fmt.Errorf("tx conns must be at least 1, got %d", c.TxConns))
	}
	return errors.Join(errs...)
}

// Bounds of the Config fields, checked by Validate (and by the engine at
// start); the daemon's INBOXD_*
// variables are checked against the same constants (package config). The
// bounds of the attempts and of the handlers run at once are
// handlers.MaxAttemptsLimit and handlers.MaxConcurrency, shared with the
// routes.
const (
	// MaxClaimBatch is the largest Config.ClaimBatch.
	MaxClaimBatch = 10000
	// MinClaimBytes is the smallest Config.ClaimBytes: 1 KiB.
	MinClaimBytes int64 = 1 << 10
	// MaxClaimBytes is the largest Config.ClaimBytes: 1 GiB.
	MaxClaimBytes int64 = 1 << 30
	// MaxPrefetch is the largest Config.Prefetch.
	MaxPrefetch = 100000
	// MinLease is the shortest Config.Lease (and INBOXD_LEASE): below it,
	// the renewal tick and the start margin (lease_fractions.go) leave no
	// room for a statement's round trip.
	MinLease = 100 * time.Millisecond
	// MinStatementTimeout is the shortest Config.StatementTimeout and
	// RetentionConfig.StatementTimeout (and INBOXD_STATEMENT_TIMEOUT).
	MinStatementTimeout = 100 * time.Millisecond
	// MinRetentionInterval is the shortest RetentionConfig.Interval (and
	// INBOXD_RETENTION_INTERVAL).
	MinRetentionInterval = 10 * time.Millisecond
	// MinPollInterval is the shortest Config.PollInterval.
	MinPollInterval = 10 * time.Millisecond
	// MaxPollInterval is the longest Config.PollInterval: the polling
	// fallback must still find rows whose notification was lost.
	MaxPollInterval = time.Minute
	// MinStatsInterval is the shortest Config.StatsInterval.
	MinStatsInterval = 100 * time.Millisecond
	// MinStaleAfter is the shortest Config.StaleAfter.
	MinStaleAfter = time.Second
	// MinRetention is the shortest RetentionConfig.Processed.
	MinRetention = time.Second
)
