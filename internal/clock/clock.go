// Package clock is the engine's time, injectable (after River's
// archetype.Time): the system's clock in production, a stub in tests, so
// that what depends on the time (leases, breakers' cool-downs, the
// measured rates, the start margins) can be tested without waiting for
// it. It tells the time only: timers, tickers and sleeps stay the
// runtime's.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time. A nil *Clock, and the zero Clock, is the system's
// clock; StubNow makes it another's. It is safe for concurrent use.
type Clock struct {
	stub atomic.Pointer[func() time.Time]
}

// Now returns the current time: time.Now, monotonic reading included,
// unless stubbed.
func (c *Clock) Now() time.Time {
	if c != nil {
		if f := c.stub.Load(); f != nil {
			return (*f)()
		}
	}
	return time.Now()
}

// Since is the time elapsed since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Until is the duration until t.
func (c *Clock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// StubNow makes c tell the time now returns, from then on (nil: the
// system's again). It is for tests.
func (c *Clock) StubNow(now func() time.Time) {
	if now == nil {
		c.stub.Store(nil)
		return
	}
	c.stub.Store(&now)
}

// Manual is a time that moves only when told to, for a Clock's stub
// (StubNow(m.Now)) in tests.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a Manual time at start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now is the manual time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Advance moves the manual time on by d.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
}
