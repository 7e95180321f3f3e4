// Package lease holds the fractions of a row's lease that the engine's
// intervals are derived from, written once, with the invariants between
// them tested (lease_test.go): when a lease is renewed, how often the
// renewals look, the margin a row needs to start, and how often expired
// leases are rescued by default (worker.Config.RescueInterval).
package lease

import "time"

// fraction is a fraction of the lease, num/den.
type fraction struct{ num, den time.Duration }

// of is the fraction of lease.
func (f fraction) of(lease time.Duration) time.Duration { return lease * f.num / f.den }

// The lease's fractions. A healthy row's lease is renewed once it has less
// than renewWithin left, and the renewal loop looks every renewEvery
// (RenewTick), so renewals keep at least renewWithin - renewEvery (half a
// lease) ahead; a row is not started, nor its start recorded, with less
// than startMargin left (a lease that has not been renewed for a while
// could overlap with a rescuer's claim), which is less than what healthy
// renewals keep. The rescuer looks for expired leases every rescueEvery
// (the RescueInterval default).
var (
	renewWithin = fraction{2, 3}
	renewEvery  = fraction{1, 6}
	startMargin = fraction{1, 3}
	rescueEvery = fraction{1, 2}
)

// Bounds of the intervals derived from the lease.
const (
	minRenewTick      = 10 * time.Millisecond
	maxRenewTick      = time.Second
	minRescueInterval = time.Second
	maxRescueInterval = 30 * time.Second
)

// RenewTick is how often the renewal loop looks for leases to extend:
// renewEvery of the lease, between 10ms and 1s.
func RenewTick(lease time.Duration) time.Duration {
	return max(min(renewEvery.of(lease), maxRenewTick), minRenewTick)
}

// RenewThreshold is how much of its lease a row may have left before it
// is renewed: two thirds.
func RenewThreshold(lease time.Duration) time.Duration { return renewWithin.of(lease) }

// StartMargin is how much of its lease a row must have left to start (and
// its start mark to be written): a third.
func StartMargin(lease time.Duration) time.Duration { return startMargin.of(lease) }

// RescueInterval is the default period of the rescuer for lease: half of
// it, between 1s and 30s.
func RescueInterval(lease time.Duration) time.Duration {
	return min(max(rescueEvery.of(lease), minRescueInterval), maxRescueInterval)
}

// shardStep is the outbox's fraction of a shard lease: see ShardStep.
var shardStep = fraction{1, 3}

// ShardStep is the outbox's one fraction of a shard lease, a third: the
// relay renews its shard leases every ShardStep, bounds each statement and
// each batch's publishing by it (so that a renewal is never held up past
// a lease), and reads no shard whose lease has less than it left.
func ShardStep(lease time.Duration) time.Duration { return shardStep.of(lease) }
