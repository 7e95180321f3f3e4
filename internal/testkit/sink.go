package testkit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/inboxd/inboxd/handlers"
)

// Delivery is what the http handler sends with one event: the headers
// inboxd sets on its request, read in one place.
type Delivery struct {
	// IdempotencyKey is Idempotency-Key: source/event_id.
	IdempotencyKey string
	// EventID is Inbox-Event-Id.
	EventID string
	// EventType is Inbox-Event-Type.
	EventType string
	// Source is Inbox-Source.
	Source string
	// Attempt is Inbox-Attempt (0 when absent or not a number).
	Attempt int
	// Body is the request body (the event's payload); nil when the sink
	// does not keep bodies.
	Body []byte
}

// DeliveryOf reads r's inboxd headers (the names handlers exports), as
// sent: escaped values are not unescaped. The body is left unread.
func DeliveryOf(r *http.Request) Delivery {
	attempt, _ := strconv.Atoi(r.Header.Get(handlers.HeaderAttempt))
	return Delivery{
		IdempotencyKey: r.Header.Get(handlers.HeaderIdempotencyKey),
		EventID:        r.Header.Get(handlers.HeaderEventID),
		EventType:      r.Header.Get(handlers.HeaderEventType),
		Source:         r.Header.Get(handlers.HeaderSource),
		Attempt:        attempt,
	}
}

// Sink is an HTTP endpoint standing in for the service behind inboxd: it
// records every delivery, body included, and answers 204 unless its hook
// answers first.
type Sink struct {
	*httptest.Server

	mu         sync.Mutex
	deliveries []Delivery
	hook       func(w http.ResponseWriter, r *http.Request, d Delivery) bool
}

// NewSink starts a sink on 127.0.0.1; it is closed when t ends.
func NewSink(t testing.TB) *Sink {
	s := &Sink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := DeliveryOf(r)
		d.Body, _ = io.ReadAll(r.Body)
		s.mu.Lock()
		s.deliveries = append(s.deliveries, d)
		hook := s.hook
		s.mu.Unlock()
		if hook != nil && hook(w, r, d) {
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.Close)
	return s
}

// SetHook makes h run on every later delivery, after it is recorded and
// before the sink answers: h may write the response and return true, or
// return false to let the sink answer 204.
func (s *Sink) SetHook(h func(w http.ResponseWriter, r *http.Request, d Delivery) bool) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

// Deliveries returns a copy of every delivery received so far, in arrival
// order.
func (s *Sink) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// ByKey returns the deliveries with Idempotency-Key key, in arrival order.
func (s *Sink) ByKey(key string) []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Delivery
	for _, d := range s.deliveries {
		if d.IdempotencyKey == key {
			out = append(out, d)
		}
	}
	return out
}
