// Package backoff is inboxd's one rule for spacing retries: exponential
// growth from a base delay up to a cap, with "equal jitter".
//
// Every retry loop in the daemon uses it: handler retries (the worker's
// RetryPolicy), failed ingest writes and fetches, failed claims and outcome
// writes, the notification listener's reconnects, and waiting for the
// database at start-up.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Exponential doubles the delay with every attempt, from Base up to Max, and
// applies "equal jitter": the delay for attempt n is drawn uniformly from
// [d/2, d] where d = min(Base·2^(n-1), Max). Half the delay is guaranteed,
// so retries never stampede back at once, and the other half spreads
// replicas that failed together.
type Exponential struct {
	// Base is the nominal delay after the first failed attempt.
	Base time.Duration
	// Max caps the nominal delay.
	Max time.Duration
	// Rand returns a number in [0, 1); nil uses math/rand/v2. Inject it to
	// make the schedule deterministic in tests.
	Rand func() float64
}

// Delay returns the jittered delay after failed attempt number attempt
// (1 for the first).
func (b Exponential) Delay(attempt int) time.Duration {
	d := b.Nominal(attempt)
	r := b.Rand
	if r == nil {
		r = rand.Float64
	}
	half := d / 2
	return half + time.Duration(r()*float64(d-half))
}

// Nominal returns the delay before jitter for attempt: Base·2^(attempt-1),
// capped at Max. It never overflows, however large attempt is.
func (b Exponential) Nominal(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := b.Base
	for i := 1; i < attempt; i++ {
		if d >= b.Max/2 {
			return b.Max
		}
		d *= 2
	}
	return min(d, b.Max)
}

// Sleep waits d or until ctx is done; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Retrier counts consecutive failures of one loop and gives the delay before
// the next try. The zero value is not usable: build it with a policy.
type Retrier struct {
	policy   Exponential
	failures int
}

// NewRetrier returns a Retrier following policy.
func NewRetrier(policy Exponential) *Retrier { return &Retrier{policy: policy} }

// Failed records a failure and returns how long to wait before trying again.
func (r *Retrier) Failed() time.Duration {
	r.failures++
	return r.policy.Delay(r.failures)
}

// Failures returns the number of consecutive failures recorded.
func (r *Retrier) Failures() int { return r.failures }

// Succeeded resets the count of consecutive failures.
func (r *Retrier) Succeeded() { r.failures = 0 }
