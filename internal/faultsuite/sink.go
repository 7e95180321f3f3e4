package faultsuite

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testkit"
)

// Sink is the HTTP service behind the daemon under load (testkit.Sink
// records every delivery for the binary's tests; this one counts instead,
// and can hold or slow the answers). It answers 204 at once
// unless told otherwise, and records every delivery by Idempotency-Key with
// the status it answered, so external duplicates can be counted.
type Sink struct {
	srv *httptest.Server

	mu       sync.Mutex
	ok       map[string]int // 2xx answers per Idempotency-Key
	total    int
	attempts map[string]int // highest Inbox-Attempt seen per key
	hold     chan struct{}  // non-nil: requests wait until it is closed or they are cancelled
	held     int            // requests waiting on hold right now
	delay    time.Duration
	bytes    int64
	keys     *keyTracker // non-nil after TrackKeys: requests in flight per ordering key
}

// NewSink starts a sink on 127.0.0.1; it is closed when t ends.
func NewSink(t testing.TB) *Sink {
	s := &Sink{ok: map[string]int{}, attempts: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.Release()
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	d := testkit.DeliveryOf(r)
	key, attempt := d.IdempotencyKey, d.Attempt
	s.mu.Lock()
	s.total++
	s.bytes += n
	s.attempts[key] = max(s.attempts[key], attempt)
	hold, delay := s.hold, s.delay
	if hold != nil {
		s.held++
	}
	if s.keys != nil {
		orderKey := s.keys.enter(d.EventID)
		defer s.keys.leave(&s.mu, orderKey)
	}
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		s.mu.Lock()
		s.held--
		s.mu.Unlock()
		if r.Context().Err() != nil {
			return // the daemon gave up on the request: no answer, no delivery
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	s.mu.Lock()
	s.ok[key]++
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// URL is the sink's address.
func (s *Sink) URL() string { return s.srv.URL }

// SetDelay makes every later request wait d before it is answered.
func (s *Sink) SetDelay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// Hold makes later requests wait until Release (or until the daemon cancels
// them; a cancelled request is not a delivery).
func (s *Sink) Hold() {
	s.mu.Lock()
	if s.hold == nil {
		s.hold = make(chan struct{})
	}
	s.mu.Unlock()
}

// Release answers the held requests and stops holding.
func (s *Sink) Release() {
	s.mu.Lock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
	s.mu.Unlock()
}

// Held is how many requests are waiting on Hold right now.
func (s *Sink) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// MaxAttempt is the highest Inbox-Attempt header seen for key.
func (s *Sink) MaxAttempt(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts[key]
}

// Deliveries is the number of 2xx answers for key.
func (s *Sink) Deliveries(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok[key]
}

// Bytes is the total size of the request bodies received.
func (s *Sink) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Requests is how many requests arrived in total.
func (s *Sink) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Duplicates is the number of 2xx deliveries beyond the first, summed over
// every Idempotency-Key.
func (s *Sink) Duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.ok {
		if c > 1 {
			n += c - 1
		}
	}
	return n
}

// DuplicateKeys returns up to limit keys delivered more than once, with
// their delivery counts.
func (s *Sink) DuplicateKeys(limit int) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, c := range s.ok {
		if c > 1 && len(out) < limit {
			out[k] = c
		}
	}
	return out
}
