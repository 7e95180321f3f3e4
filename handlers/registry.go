package handlers

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Route is what the Registry returns for an event type: exactly one of
// Handler and TxHandler is set.
type Route struct {
	// Handler is set for plain handlers.
	Handler Handler
	// TxHandler is set for transactional handlers.
	TxHandler TxHandler
}

// Registry maps exact event types to handlers. Types with no handler go to
// the default, which dead-letters them unless SetDefault says otherwise. A
// Registry is safe for concurrent use; register before starting workers.
type Registry struct {
	mu       sync.RWMutex
	routes   map[string]Route
	fallback Route
}

// NewRegistry returns an empty registry whose default dead-letters events.
func NewRegistry() *Registry {
	return &Registry{routes: make(map[string]Route), fallback: Route{Handler: Dead()}}
}

// ErrDuplicate is returned when an event type is registered twice.
var ErrDuplicate = errors.New("handler already registered")

// Handle registers h for eventType.
func (r *Registry) Handle(eventType string, h Handler) error {
	if h == nil {
		return fmt.Errorf("event type %q: nil handler", eventType)
	}
	return r.add(eventType, Route{Handler: h})
}

// HandleFunc registers f for eventType.
func (r *Registry) HandleFunc(eventType string, f func(ctx context.Context, ev *Event) error) error {
	if f == nil {
		return fmt.Errorf("event type %q: nil handler", eventType)
	}
	return r.Handle(eventType, HandlerFunc(f))
}

// HandleTx registers the transactional handler h for eventType.
func (r *Registry) HandleTx(eventType string, h TxHandler) error {
	if h == nil {
		return fmt.Errorf("event type %q: nil handler", eventType)
	}
	return r.add(eventType, Route{TxHandler: h})
}

func (r *Registry) add(eventType string, route Route) error {
	if eventType == "" {
		return errors.New("event type must not be empty")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.routes[eventType]; ok {
		return fmt.Errorf("event type %q: %w", eventType, ErrDuplicate)
	}
	r.routes[eventType] = route
	return nil
}

// SetDefault sets the handler for event types that have none.
func (r *Registry) SetDefault(h Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fallback = Route{Handler: h}
}

// Lookup returns the route for eventType, or the default.
func (r *Registry) Lookup(eventType string) Route {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if route, ok := r.routes[eventType]; ok {
		return route
	}
	return r.fallback
}

// Clone returns a new Registry with the same routes and default. Changes to
// either do not affect the other.
func (r *Registry) Clone() *Registry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := &Registry{routes: make(map[string]Route, len(r.routes)), fallback: r.fallback}
	for t, route := range r.routes {
		c.routes[t] = route
	}
	return c
}

// Routed reports whether eventType has a route of its own (not the default).
func (r *Registry) Routed(eventType string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.routes[eventType]
	return ok
}

// Types returns the number of event types registered.
func (r *Registry) Types() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.routes)
}

// Ignore returns a handler that does nothing: the row is marked processed.
func Ignore() Handler {
	return HandlerFunc(func(context.Context, *Event) error { return nil })
}

// Dead returns a handler that dead-letters every event at once, naming its
// type in last_error. It is the default for unrouted event types.
func Dead() Handler {
	return HandlerFunc(func(_ context.Context, ev *Event) error {
		return Permanent(fmt.Errorf("no handler for event type %q", ev.EventType))
	})
}
