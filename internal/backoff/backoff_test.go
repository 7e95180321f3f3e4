package backoff

import (
	"testing"
	"time"
)

func TestExponentialSchedule(t *testing.T) {
	t.Parallel()
	lo := Exponential{Base: time.Second, Max: time.Minute, Rand: func() float64 { return 0 }}
	hi := Exponential{Base: time.Second, Max: time.Minute, Rand: func() float64 { return 0.999999 }}
	nominal := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i, n := range nominal {
		attempt := i + 1
		want := n * time.Second
		if got := lo.Nominal(attempt); got != want {
			t.Errorf("Nominal(%d) = %s, want %s", attempt, got, want)
		}
		if got := lo.Delay(attempt); got != want/2 {
			t.Errorf("lowest jitter for attempt %d = %s, want %s", attempt, got, want/2)
		}
		if got := hi.Delay(attempt); got < want-want/1000 || got > want {
			t.Errorf("highest jitter for attempt %d = %s, want just under %s", attempt, got, want)
		}
	}
	// Large attempt numbers must not overflow.
	if got := lo.Nominal(500); got != time.Minute {
		t.Errorf("Nominal(500) = %s, want the cap", got)
	}
	if got := lo.Nominal(0); got != time.Second {
		t.Errorf("Nominal(0) = %s, want the base", got)
	}
	// With real randomness every delay stays within [d/2, d].
	real := Exponential{Base: 100 * time.Millisecond, Max: 10 * time.Second}
	for attempt := 1; attempt < 20; attempt++ {
		d := real.Nominal(attempt)
		for range 200 {
			if got := real.Delay(attempt); got < d/2 || got > d {
				t.Fatalf("attempt %d: delay %s outside [%s, %s]", attempt, got, d/2, d)
			}
		}
	}
}

func TestRetrier(t *testing.T) {
	t.Parallel()
	r := NewRetrier(Exponential{Base: time.Second, Max: 4 * time.Second, Rand: func() float64 { return 0.999999 }})
	var got []time.Duration
	for range 4 {
		got = append(got, r.Failed().Round(time.Second))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays = %v, want %v", got, want)
		}
	}
	if r.Failures() != 4 {
		t.Fatalf("Failures = %d, want 4", r.Failures())
	}
	r.Succeeded()
	if d := r.Failed().Round(time.Second); d != time.Second {
		t.Fatalf("after success the delay restarts: got %s, want 1s", d)
	}
}
