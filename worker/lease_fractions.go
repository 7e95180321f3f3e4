package worker

import "time"

// leaseFraction is a fraction of the lease, num/den: every interval the
// engine derives from Config.Lease is one of the fractions below, written
// once, with the invariants between them tested (lease_fractions_test.go).
type leaseFraction struct{ num, den time.Duration }

// of is the fraction of lease.
func (f leaseFraction) of(lease time.Duration) time.Duration { return lease * f.num / f.den }

// The lease's fractions. A healthy row's lease is renewed once it has less
// than renewWithin left, and the renewal loop looks every renewEvery
// (renewTick), so renewals keep at least renewWithin - renewEvery (half a
// lease) ahead; a row is not started, nor its start recorded, with less
// than startMargin left (a lease that has not been renewed for a while
// could overlap with a rescuer's claim), which is less than what healthy
// renewals keep. The rescuer looks for expired leases every rescueEvery
// (the RescueInterval default).
var (
	renewWithin = leaseFraction{2, 3}
	renewEvery  = leaseFraction{1, 6}
	startMargin = leaseFraction{1, 3}
	rescueEvery = leaseFraction{1, 2}
)

// Bounds of the intervals derived from the lease.
const (
	minRenewTick      = 10 * time.Millisecond
	maxRenewTick      = time.Second
	minRescueInterval = time.Second
	maxRescueInterval = 30 * time.Second
)

// renewTick is how often the renewal loop looks for leases to extend:
// renewEvery of the lease, between minRenewTick and maxRenewTick.
func (c Config) renewTick() time.Duration {
	return max(min(renewEvery.of(c.Lease), maxRenewTick), minRenewTick)
}

// renewThreshold is how much of its lease a row may have left before it is
// renewed.
func (c Config) renewThreshold() time.Duration { return renewWithin.of(c.Lease) }

// startMargin is how much of its lease a row must have left to start (and
// its start mark to be written).
func (c Config) startMargin() time.Duration { return startMargin.of(c.Lease) }

// defaultRescueInterval is RescueInterval's default: rescueEvery of the
// lease, between minRescueInterval and maxRescueInterval.
func (c Config) defaultRescueInterval() time.Duration {
	return min(max(rescueEvery.of(c.Lease), minRescueInterval), maxRescueInterval)
}
