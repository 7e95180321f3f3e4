package testkit

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

// run calls f with a recorder and returns what it failed with ("" if it
// did not).
func run(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil && p != r {
				panic(p)
			}
		}()
		f(r)
	}()
	return r.failed
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	if failed := run(t, func(tb testing.TB) {
		WaitFor(tb, 5*time.Second, "the third poll", func() bool { n++; return n == 3 })
	}); failed != "" {
		t.Fatalf("WaitFor failed: %s", failed)
	}
	if n != 3 {
		t.Fatalf("cond evaluated %d times, want 3", n)
	}
}

func TestWaitForFailsAfterTheTimeout(t *testing.T) {
	start := time.Now()
	failed := run(t, func(tb testing.TB) {
		WaitFor(tb, 50*time.Millisecond, "nothing", func() bool { return false })
	})
	if failed == "" {
		t.Fatal("WaitFor returned for a condition that never held")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("WaitFor gave up after %s, before its 50ms timeout", took)
	}
}

func TestUnavailableFailsUnderCI(t *testing.T) {
	t.Setenv("CI", "true")
	if failed := run(t, func(tb testing.TB) { Unavailable(tb, "no tool") }); failed == "" {
		t.Fatal("Unavailable did not fail under CI=true")
	}
}

func TestRandIsReproducibleFromItsSeed(t *testing.T) {
	t.Setenv(SeedEnv, "42")
	a, b := Rand(t), Rand(t)
	for range 10 {
		if x, y := a.Uint64(), b.Uint64(); x != y {
			t.Fatalf("two sources from seed 42 differ: %d, %d", x, y)
		}
	}
}

func TestWriteRoutes(t *testing.T) {
	p := WriteRoutes(t, "default: ignore\n")
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "default: ignore\n" {
		t.Fatalf("routes file %s = %q, %v", p, b, err)
	}
}

func TestSinkRecordsDeliveriesAndRunsItsHook(t *testing.T) {
	s := NewSink(t)
	s.SetHook(func(w http.ResponseWriter, _ *http.Request, d Delivery) bool {
		if d.Attempt == 1 {
			http.Error(w, "flaky", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	for attempt, want := range map[string]int{"1": http.StatusServiceUnavailable, "2": http.StatusNoContent} {
		req, err := http.NewRequest(http.MethodPost, s.URL, strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "orders/e-1")
		req.Header.Set("Inbox-Attempt", attempt)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("attempt %s answered %d, want %d", attempt, resp.StatusCode, want)
		}
	}
	got := s.ByKey("orders/e-1")
	if len(got) != 2 || string(got[0].Body) != "payload" {
		t.Fatalf("ByKey = %+v, want both attempts with their body", got)
	}
	if n := len(s.ByKey("orders/other")); n != 0 {
		t.Fatalf("ByKey of an unknown key = %d deliveries", n)
	}
}
