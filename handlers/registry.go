package handlers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Route is what the Registry returns for an event type.
type Route struct {
	// Type is the event type routed; "" for the default route.
	Type string
	// Handler runs an event, with the registry's middleware applied. For a
	// transactional route (Tx) it expects its transaction in the context
	// (ContextWithTx); the engine puts it there.
	Handler Handler
	// Tx marks a transactional route: the engine runs Handler inside the
	// transaction that marks the row processed.
	Tx bool
	// Policy is how the engine runs the route's rows.
	Policy Policy
	// Batch runs a batch route's rows, many at a time (Policy.Batch says
	// how many); nil on other routes. Tx says whether it is given a
	// transaction (a TxBatchHandler) or nil (a BatchHandler).
	Batch TxBatchHandler
}

// entry is one registered route before middleware.
type entry struct {
	handler Handler
	tx      bool
	policy  Policy
	wrapped Handler        // handler with the middleware applied
	batch   TxBatchHandler // a batch route's handler (Route.Batch)
}

// Registry maps exact event types to handlers. Types with no handler go to
// the default, which dead-letters them unless SetDefault says otherwise. A
// Registry is safe for concurrent use; register before starting workers.
type Registry struct {
	mu         sync.RWMutex
	routes     map[string]*entry
	fallback   *entry
	middleware []Middleware
}

// NewRegistry returns an empty registry whose default dead-letters events.
func NewRegistry() *Registry {
	return &Registry{routes: make(map[string]*entry), fallback: &entry{handler: Dead(), wrapped: Dead()}}
}

// ErrDuplicate is returned when an event type is registered twice.
var ErrDuplicate = errors.New("handler already registered")

// Handle registers h for eventType, run as opts say (the engine's defaults
// otherwise).
func (r *Registry) Handle(eventType string, h Handler, opts ...Option) error {
	if h == nil {
		return fmt.Errorf("event type %q: nil handler", eventType)
	}
	return r.add(eventType, &entry{handler: h, policy: policyOf(opts)})
}

// HandleFunc registers f for eventType, run as opts say.
func (r *Registry) HandleFunc(eventType string, f func(ctx context.Context, ev *Event) error, opts ...Option) error {
	if f == nil {
		return fmt.Errorf("event type %q: nil handler", eventType)
	}
	return r.Handle(eventType, HandlerFunc(f), opts...)
}

// HandleTx registers the transactional handler h for eventType, run as opts
// say.
func (r *Registry) HandleTx(eventType string, h TxHandler, opts ...Option) error {
	if h == nil {
		return fmt.Errorf("event type %q: nil handler", eventType)
	}
	return r.add(eventType, &entry{handler: txAdapter{h}, tx: true, policy: policyOf(opts)})
}

func policyOf(opts []Option) Policy {
	var p Policy
	for _, o := range opts {
		o(&p)
	}
	return p
}

func (r *Registry) add(eventType string, e *entry) error {
	if eventType == "" {
		return errors.New("event type must not be empty")
	}
	if errs := append(e.policy.validate(), e.policy.checkBatch(e.batch != nil)...); len(errs) > 0 {
		return fmt.Errorf("event type %q: %s", eventType, strings.Join(errs, "; "))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.routes[eventType]; ok {
		return fmt.Errorf("event type %q: %w", eventType, ErrDuplicate)
	}
	e.wrapped = Chain(e.handler, r.middleware...)
	r.routes[eventType] = e
	return nil
}

// Use adds middleware around every handler of the registry, registered
// before or after, the default included. Middleware added first runs
// outermost.
func (r *Registry) Use(mw ...Middleware) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.middleware = append(r.middleware, mw...)
	for _, e := range r.routes {
		e.wrapped = Chain(e.handler, r.middleware...)
	}
	r.fallback.wrapped = Chain(r.fallback.handler, r.middleware...)
}

// SetDefault sets the handler for event types that have none, run as opts
// say (ordering does not apply to the default route).
func (r *Registry) SetDefault(h Handler, opts ...Option) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := policyOf(opts)
	p.Ordered, p.OnDead = false, ""
	r.fallback = &entry{handler: h, policy: p, wrapped: Chain(h, r.middleware...)}
}

// Lookup returns the route for eventType, or the default.
func (r *Registry) Lookup(eventType string) Route {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.routes[eventType]; ok {
		return e.route(eventType)
	}
	return r.fallback.route("")
}

func (e *entry) route(eventType string) Route {
	return Route{Type: eventType, Handler: e.wrapped, Tx: e.tx, Policy: e.policy, Batch: e.batch}
}

// Routed reports whether eventType has a route of its own (not the default).
func (r *Registry) Routed(eventType string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.routes[eventType]
	return ok
}

// Routes returns the routes of their own, sorted by event type.
func (r *Registry) Routes() []Route {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Route, 0, len(r.routes))
	for t, e := range r.routes {
		out = append(out, e.route(t))
	}
	slices.SortFunc(out, func(a, b Route) int { return strings.Compare(a.Type, b.Type) })
	return out
}

// Default returns the default route, for event types without one.
func (r *Registry) Default() Route {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.fallback.route("")
}

// Clone returns a new Registry with the same routes, default and
// middleware. Changes to either do not affect the other.
func (r *Registry) Clone() *Registry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := &Registry{routes: make(map[string]*entry, len(r.routes)), middleware: slices.Clone(r.middleware)}
	for t, e := range r.routes {
		cp := *e
		c.routes[t] = &cp
	}
	fb := *r.fallback
	c.fallback = &fb
	return c
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
