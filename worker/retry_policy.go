package worker

import (
	"math/rand/v2"
	"time"
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
// spreads them out.
type ExponentialBackoff struct {
	// Base is the nominal delay after the first failed attempt.
	Base time.Duration
	// Max caps the nominal delay.
	Max time.Duration
	// Rand returns a number in [0, 1); nil uses math/rand/v2. Inject it to
	// make the schedule deterministic in tests.
	Rand func() float64
}

// NextRetry implements RetryPolicy.
func (b ExponentialBackoff) NextRetry(attempt int) time.Duration {
	d := b.Nominal(attempt)
	r := b.Rand
	if r == nil {
		r = rand.Float64
	}
	half := d / 2
	return half + time.Duration(r()*float64(d-half))
}

// Nominal returns the delay before jitter for attempt: Base·2^(attempt-1),
// capped at Max.
func (b ExponentialBackoff) Nominal(attempt int) time.Duration {
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
