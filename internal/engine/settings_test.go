package engine

import (
	"testing"

	"github.com/inboxd/inboxd/worker"
)

// The pool resolves Prefetch as worker.Config documents it, and the same
// whether it is given a Config or that Config with its defaults: 0 adapts
// (starting at min(ClaimBatch, 4·Workers)), negative is none, anything
// else is fixed.
func TestSettingsResolveThePrefetch(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		prefetch, want int
		adaptive       bool
	}{
		{0, 40, true},
		{-1, 0, false},
		{7, 7, false},
	} {
		c := worker.Config{Workers: 10, ClaimBatch: 500, Prefetch: tt.prefetch}
		for _, given := range []worker.Config{c, c.WithDefaults()} {
			s, err := newSettings(given)
			if err != nil {
				t.Fatal(err)
			}
			if s.Prefetch != tt.want || s.adaptivePrefetch != tt.adaptive {
				t.Errorf("Prefetch %d: runs with %d (adaptive %v), want %d (adaptive %v)", tt.prefetch, s.Prefetch, s.adaptivePrefetch, tt.want, tt.adaptive)
			}
		}
	}
	if _, err := newSettings(worker.Config{Prefetch: worker.MaxPrefetch + 1}); err == nil {
		t.Error("a prefetch past worker.MaxPrefetch is accepted")
	}
}
