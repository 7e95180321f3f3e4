package handlers

import (
	"fmt"
	"time"
)

// OnDead says what an ordered route does with a key whose row went dead.
type OnDead string

const (
	// OnDeadBlock keeps the key stopped until the dead row is requeued or
	// discarded: later rows of the key wait (the default).
	OnDeadBlock OnDead = "block"
	// OnDeadSkip lets the key move on to its next row.
	OnDeadSkip OnDead = "skip"
)

// Policy is how the engine runs one route's rows. Zero fields take the
// engine's defaults (INBOXD_WORKERS, INBOXD_MAX_ATTEMPTS, INBOXD_BACKOFF_BASE,
// INBOXD_BACKOFF_MAX; no timeout; unordered).
type Policy struct {
	// Concurrency is the most rows of the route in handlers at once in one
	// replica. Claims never take a row the route has no room for, so a
	// saturated route cannot hold the others back.
	Concurrency int
	// MaxAttempts is the number of attempts before a failing row goes dead.
	MaxAttempts int
	// BackoffBase is the delay after the first failed attempt.
	BackoffBase time.Duration
	// BackoffMax caps the delay between attempts (and Retry-After).
	BackoffMax time.Duration
	// Timeout bounds each attempt: the handler's context is cancelled after
	// it, and the attempt counts as failed.
	Timeout time.Duration
	// Ordered hands rows with the same (source, key) to their handlers
	// strictly in arrival order, one at a time per key; different keys run
	// in parallel. Rows without a key are not ordered. Ordering holds
	// across every ordered route: an order's created, paid and shipped
	// events keep their order even when their types have routes of their
	// own.
	Ordered bool
	// OnDead says what happens to an ordered key when one of its rows goes
	// dead (default OnDeadBlock).
	OnDead OnDead
	// Rate is the most rows of the route claimed per second by every
	// replica together (0: no limit). The replicas take their rows' tokens
	// from one bucket in the database (table route_tokens), refilled at
	// Rate and holding at most Burst tokens, so that an endpoint that
	// accepts 50 requests a second gets at most that from the whole fleet.
	Rate float64
	// Burst is how many tokens the route's bucket holds at most: the rows
	// the fleet may claim at once after a quiet spell (0: one second's
	// worth of Rate, at least 1). Only with Rate.
	Burst int
	// Breaker is the route's circuit breaker (off when Failures is 0).
	Breaker Breaker
	// Batch is how a batch route (a BatchHandler or TxBatchHandler)
	// gathers its rows; MaxRows is 0 on every other route. A batch
	// route's Concurrency counts rows, not batches (0: twice MaxRows).
	Batch Batch
}

// Breaker is a route's circuit breaker, kept by each replica for itself:
// after Failures consecutive failed attempts (retried or dead) the route
// claims no rows on that replica for CoolDown; then it claims one row
// (half-open), whose success closes the breaker and whose failure opens
// it again.
type Breaker struct {
	// Failures is how many consecutive failed attempts open the breaker
	// (0: no breaker).
	Failures int
	// CoolDown is how long the breaker stays open before it half-opens.
	CoolDown time.Duration
}

// MaxRate is the highest Policy.Rate accepted, in rows per second.
const MaxRate = 1_000_000

// BlocksKey reports whether the route's dead rows hold their key back:
// an ordered route whose OnDead is OnDeadBlock (or left empty, the
// default).
func (p Policy) BlocksKey() bool { return p.Ordered && p.OnDead != OnDeadSkip }

// validate checks the policy's values; every error names its field as the
// routes file does.
func (p Policy) validate() []string {
	var errs []string
	// 0 is the engine's default (INBOXD_WORKERS, INBOXD_MAX_ATTEMPTS).
	if p.Concurrency < 0 || p.Concurrency > MaxConcurrency {
		errs = append(errs, fmt.Sprintf("concurrency: must be between 1 and %d, got %d", MaxConcurrency, p.Concurrency))
	}
	if p.MaxAttempts < 0 || p.MaxAttempts > MaxAttemptsLimit {
		errs = append(errs, fmt.Sprintf("max_attempts: must be between 1 and %d, got %d", MaxAttemptsLimit, p.MaxAttempts))
	}
	if p.BackoffBase < 0 || (p.BackoffBase > 0 && p.BackoffBase < MinBackoff) { // 0: INBOXD_BACKOFF_BASE
		errs = append(errs, fmt.Sprintf("backoff_base: must be at least %s", MinBackoff))
	}
	if p.BackoffMax < 0 || (p.BackoffMax > 0 && p.BackoffBase > p.BackoffMax) {
		errs = append(errs, "backoff_max: must be at least backoff_base")
	}
	switch {
	case p.Timeout < 0:
		errs = append(errs, "timeout: must be greater than 0")
	case p.Timeout > MaxTimeout:
		errs = append(errs, fmt.Sprintf("timeout: must be at most %s", MaxTimeout))
	}
	switch p.OnDead {
	case "", OnDeadBlock, OnDeadSkip:
	default:
		errs = append(errs, fmt.Sprintf("on_dead: must be block or skip, not %q", p.OnDead))
	}
	if p.OnDead != "" && !p.Ordered {
		errs = append(errs, "on_dead: only for ordered routes (ordered: true)")
	}
	if p.Rate < 0 || p.Rate > MaxRate || p.Rate != p.Rate {
		errs = append(errs, fmt.Sprintf("rate: must be between 0 and %d per second", MaxRate))
	}
	switch {
	case p.Burst < 0 || p.Burst > MaxBurst:
		errs = append(errs, fmt.Sprintf("burst: must be between 1 and %d, got %d", MaxBurst, p.Burst))
	case p.Burst > 0 && p.Rate == 0:
		errs = append(errs, "burst: only with a rate")
	}
	switch b := p.Breaker; {
	case b.Failures < 0 || b.Failures > MaxBreakerFailures:
		errs = append(errs, fmt.Sprintf("breaker: failures: must be between 1 and %d, got %d", MaxBreakerFailures, b.Failures))
	case b.Failures > 0 && (b.CoolDown <= 0 || b.CoolDown > MaxCoolDown):
		errs = append(errs, fmt.Sprintf("breaker: cool_down: must be greater than 0 and at most %s", MaxCoolDown))
	case b.Failures == 0 && b.CoolDown != 0:
		errs = append(errs, "breaker: failures: required with cool_down")
	}
	return errs
}

// MaxBurst is the largest Policy.Burst accepted.
const MaxBurst = 1_000_000

// MaxBreakerFailures is the largest Breaker.Failures accepted.
const MaxBreakerFailures = 1_000_000

// MaxCoolDown is the longest Breaker.CoolDown accepted.
const MaxCoolDown = 24 * time.Hour

// MaxTimeout is the longest per-route timeout accepted.
const MaxTimeout = 10 * time.Minute

// MaxAttemptsLimit is the most attempts a row may be given before it goes
// dead, whoever sets it: a route's max_attempts (Policy.MaxAttempts), the
// engine's worker.Config.MaxAttempts and INBOXD_MAX_ATTEMPTS all accept 1
// to MaxAttemptsLimit. It is defined here, the lowest package the three
// share, so that it is defined once. (The schema's bound on the attempts
// column, 1,000,000 in migrations/002_started_attempts.sql, is far above:
// no count of attempts can overflow.)
const MaxAttemptsLimit = 1000

// MinBackoff is the shortest delay after a first failed attempt, for a
// route (Policy.BackoffBase) and for the daemon (INBOXD_BACKOFF_BASE).
const MinBackoff = time.Millisecond

// MaxConcurrency is the most handlers run at once, in one replica, for one
// route (Policy.Concurrency) and for the whole pool (worker.Config.Workers,
// INBOXD_WORKERS).
const MaxConcurrency = 10000

// Option sets part of a route's Policy when it is registered in Go.
type Option func(*Policy)

// Concurrency sets Policy.Concurrency.
func Concurrency(n int) Option { return func(p *Policy) { p.Concurrency = n } }

// MaxAttempts sets Policy.MaxAttempts.
func MaxAttempts(n int) Option { return func(p *Policy) { p.MaxAttempts = n } }

// Backoff sets Policy.BackoffBase and Policy.BackoffMax.
func Backoff(base, max time.Duration) Option {
	return func(p *Policy) { p.BackoffBase, p.BackoffMax = base, max }
}

// Timeout sets Policy.Timeout.
func Timeout(d time.Duration) Option { return func(p *Policy) { p.Timeout = d } }

// RateLimit sets Policy.Rate (rows per second, for the whole fleet) and
// Policy.Burst (0: one second's worth).
func RateLimit(perSecond float64, burst int) Option {
	return func(p *Policy) { p.Rate, p.Burst = perSecond, burst }
}

// CircuitBreaker sets Policy.Breaker: after failures consecutive failed
// attempts the route claims nothing on the replica for coolDown.
func CircuitBreaker(failures int, coolDown time.Duration) Option {
	return func(p *Policy) { p.Breaker = Breaker{Failures: failures, CoolDown: coolDown} }
}

// Ordered makes the route ordered (Policy.Ordered) with onDead for keys whose
// row goes dead ("" means OnDeadBlock).
func Ordered(onDead OnDead) Option {
	return func(p *Policy) { p.Ordered, p.OnDead = true, onDead }
}
