package faultsuite

import (
	"sort"
	"sync"
)

// keyTracker counts a Sink's requests in flight per ordering key (the key
// a scenario derives from each request's Inbox-Event-Id), and the keys that
// ever had two in flight at once. Guarded by the Sink's mutex.
type keyTracker struct {
	keyOf    func(eventID string) string
	inFlight map[string]int
	overlaps map[string]int // key → requests that started while another of its key was in flight
	order    map[string][]string
}

// TrackKeys makes the sink count, per ordering key keyOf(Inbox-Event-Id),
// the requests in flight at once and the order in which a key's event ids
// arrived (see Overlaps and Arrivals). Call it before the daemon starts.
func (s *Sink) TrackKeys(keyOf func(eventID string) string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = &keyTracker{keyOf: keyOf, inFlight: map[string]int{}, overlaps: map[string]int{}, order: map[string][]string{}}
}

// enter records a request for eventID and returns its key; the Sink's
// mutex must be held.
func (k *keyTracker) enter(eventID string) string {
	key := k.keyOf(eventID)
	if k.inFlight[key] > 0 {
		k.overlaps[key]++
	}
	k.inFlight[key]++
	k.order[key] = append(k.order[key], eventID)
	return key
}

// leave records the end of a request of key, taking mu (the Sink's).
func (k *keyTracker) leave(mu *sync.Mutex, key string) {
	mu.Lock()
	k.inFlight[key]--
	mu.Unlock()
}

// Overlaps returns, sorted, the keys that had two requests in flight at
// once since TrackKeys (none when keys are not tracked).
func (s *Sink) Overlaps() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		return nil
	}
	var out []string
	for k := range s.keys.overlaps {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Arrivals returns the event ids of key's requests in the order they
// arrived (retries included).
func (s *Sink) Arrivals(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		return nil
	}
	return append([]string(nil), s.keys.order[key]...)
}
