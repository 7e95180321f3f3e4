package lease

import (
	"testing"
	"time"
)

// The intervals derived from the lease keep their invariants for every
// lease the engine accepts (from 100ms, worker.MinLease): renewals tick
// more often than a lease needs renewing, keep at least half a lease ahead
// when healthy, and a healthily renewed row always has more than the start
// margin left, so that it is never given back as at risk.
func TestLeaseFractionInvariants(t *testing.T) {
	t.Parallel()
	for _, lease := range []time.Duration{100 * time.Millisecond, 150 * time.Millisecond, time.Second, 3 * time.Second,
		6 * time.Second, 30 * time.Second, 2 * time.Minute, time.Hour} {
		tick, threshold, margin := RenewTick(lease), RenewThreshold(lease), StartMargin(lease)
		if !(0 < tick && tick < threshold && threshold < lease) {
			t.Errorf("lease %s: want 0 < renew tick %s < renew threshold %s < lease", lease, tick, threshold)
		}
		// A lease is renewed at the first tick after less than threshold is
		// left: at worst threshold - tick is left then.
		if worst := threshold - tick; worst < lease/2 {
			t.Errorf("lease %s: a healthy renewal may leave only %s, less than half the lease", lease, worst)
		} else if worst <= margin {
			t.Errorf("lease %s: a healthy renewal may leave %s, not more than the start margin %s", lease, worst, margin)
		}
		if margin <= 0 || margin >= threshold {
			t.Errorf("lease %s: want 0 < start margin %s < renew threshold %s", lease, margin, threshold)
		}
		if r := RescueInterval(lease); r < minRescueInterval || r > maxRescueInterval || (r != rescueEvery.of(lease) && r != minRescueInterval && r != maxRescueInterval) {
			t.Errorf("lease %s: default rescue interval %s is not half the lease within [%s, %s]", lease, r, minRescueInterval, maxRescueInterval)
		}
	}
}

// The fractions are what the documentation says: renewals after a third
// of the lease, looked for every sixth (within bounds), rows started with
// at least a third left, rescues every half lease (within bounds).
func TestLeaseFractions(t *testing.T) {
	t.Parallel()
	lease := 30 * time.Second
	for _, tt := range []struct {
		name      string
		got, want time.Duration
	}{
		{"renew threshold", RenewThreshold(lease), 20 * time.Second},
		{"renew tick (capped)", RenewTick(lease), time.Second},
		{"start margin", StartMargin(lease), 10 * time.Second},
		{"rescue interval", RescueInterval(lease), 15 * time.Second},
		{"renew tick", RenewTick(3 * time.Second), 500 * time.Millisecond},
		{"rescue interval (floor)", RescueInterval(time.Second), time.Second},
		{"rescue interval (cap)", RescueInterval(10 * time.Minute), 30 * time.Second},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %s, want %s", tt.name, tt.got, tt.want)
		}
	}
}
