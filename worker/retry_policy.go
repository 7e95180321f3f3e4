package worker

import (
	"time"

	"github.com/inboxd/inboxd/internal/backoff"
)

// RetryPolicy decides how long a row waits before its next attempt.
type RetryPolicy interface {
	// NextRetry returns the delay after failed attempt number attempt
	// (1 for the first attempt).
	NextRetry(attempt int) time.Duration
}

// ExponentialBackoff doubles the delay with every attempt, from Base up to
// Max, and applies "equal jitter": the delay for attempt n is drawn
// uniformly from [d/2, d] where d = min(Base·2^(n-1), Max). Half the delay
// is guaranteed, so retries never stampede back at once, and the other half
// spreads them out. It is the daemon's one backoff rule (package
// internal/backoff) as a RetryPolicy.
type ExponentialBackoff struct {
	// Base is the nominal delay after the first failed attempt.
	Base time.Duration
	// Max caps the nominal delay.
	Max time.Duration
	// Rand returns a number in [0, 1); nil uses math/rand/v2. Inject it to
	// make the schedule deterministic in tests.
	Rand func() float64
}

func (b ExponentialBackoff) policy() backoff.Exponential {
	return backoff.Exponential{Base: b.Base, Max: b.Max, Rand: b.Rand}
}

// NextRetry implements RetryPolicy.
func (b ExponentialBackoff) NextRetry(attempt int) time.Duration { return b.policy().Delay(attempt) }
