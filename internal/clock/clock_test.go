package clock

import (
	"testing"
	"time"
)

// A nil or zero Clock is the system's; a stubbed one tells the stub's
// time until the stub is taken away.
func TestClock(t *testing.T) {
	t.Parallel()
	var none *Clock
	before := time.Now()
	if got := none.Now(); got.Before(before) {
		t.Errorf("a nil Clock's Now %v is before time.Now %v", got, before)
	}
	c := &Clock{}
	m := NewManual(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	c.StubNow(m.Now)
	start := c.Now()
	m.Advance(90 * time.Second)
	if got := c.Since(start); got != 90*time.Second {
		t.Errorf("Since = %s after advancing 90s, want 90s", got)
	}
	if got := c.Until(start.Add(time.Hour)); got != time.Hour-90*time.Second {
		t.Errorf("Until = %s, want 58m30s", got)
	}
	c.StubNow(nil)
	if got := c.Now(); got.Year() == 2030 {
		t.Errorf("Now after the stub was taken away = %v, want the system's", got)
	}
}
