package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/opfiles"
)

// The handler kinds a routes file can name, in a route's handler field or
// (ignore and dead only) in the default field.
const (
	// HandlerHTTP POSTs the event to the route's url; see NewHTTP.
	HandlerHTTP = "http"
	// HandlerIgnore marks the event processed and does nothing; see Ignore.
	HandlerIgnore = "ignore"
	// HandlerDead dead-letters the event at once; see Dead.
	HandlerDead = "dead"
	// HandlerRiver enqueues a River job in the transaction that marks the
	// row processed; see NewJobRoute.
	HandlerRiver = "river"
)

const (
	// DefaultHTTPTimeout is the timeout of an http route that names none.
	DefaultHTTPTimeout = 10 * time.Second
	// MaxHTTPTimeout is the longest timeout an http route may name.
	MaxHTTPTimeout = MaxTimeout
)

// Routes is a set of routes to built-in handlers, the content of the
// operator's routes file (INBOXD_ROUTES; the daemon parses it, and
// docs/routes.md gives its format) or built in Go. Register puts them on
// a Registry, all or nothing; every error names the route at fault,
// numbered from 1, with its type:
//
//	routes: route 2 (type "order.created"): url: must be an absolute http or https URL
//
// and Register reports all errors found, one per line (the first
// opfiles.MaxReported of them, then a count of the rest).
type Routes struct {
	// Routes lists the routes in file order.
	Routes []RouteConfig
	// Default is the handler kind for event types without a route:
	// HandlerDead or HandlerIgnore. The parser sets it to HandlerDead when
	// the file names none; Register treats an empty Default the same way.
	Default string
	// File names the routes' file in Register's errors; empty, they say
	// "routes".
	File string
}

// RouteConfig is one entry of a routes file.
type RouteConfig struct {
	// Type is the exact event type routed.
	Type string
	// Handler is the handler kind: HandlerHTTP, HandlerIgnore, HandlerDead
	// or HandlerRiver.
	Handler string
	// URL is where an http route POSTs events; it is empty for other kinds.
	URL string
	// Timeout bounds each attempt (for http, each request). The parser sets
	// DefaultHTTPTimeout for an http route that names none; zero means no
	// bound for the other kinds.
	Timeout time.Duration
	// IdempotencyKey selects the Idempotency-Key header of an http route
	// (see HTTPConfig.IdempotencyKey); empty for other kinds.
	IdempotencyKey string
	// Concurrency, MaxAttempts, BackoffBase and BackoffMax override the
	// engine's defaults for the route (zero: the default); see Policy. On a
	// river route MaxAttempts is the River job's max attempts instead.
	Concurrency, MaxAttempts int
	// BackoffBase and BackoffMax space the route's retries.
	BackoffBase, BackoffMax time.Duration
	// Ordered and OnDead make the route ordered; see Policy.
	Ordered bool
	// OnDead is block or skip (ordered routes only).
	OnDead string
	// Kind, Queue and Priority describe the River job of a river route.
	Kind, Queue string
	// Priority is the River job's priority, 1 (highest) to 4.
	Priority int
	// Rate is the route's rate limit in rows per second for the whole
	// fleet (0: none); the file gives it as 50/s or 3000/m. See
	// Policy.Rate.
	Rate float64
	// Burst is the rate limit's bucket size (0: one second's worth); see
	// Policy.Burst.
	Burst int
	// Breaker is the route's circuit breaker; see Policy.Breaker.
	Breaker Breaker
	// Batch makes an http or river route a batch route (Policy.Batch):
	// an http route POSTs its rows as one JSON array, a river route
	// inserts their jobs with one InsertJobs (River's InsertManyTx).
	Batch Batch
}

// Policy returns the engine policy the route asks for.
func (rc RouteConfig) Policy() Policy {
	p := Policy{
		Concurrency: rc.Concurrency, BackoffBase: rc.BackoffBase, BackoffMax: rc.BackoffMax,
		Timeout: rc.Timeout, Ordered: rc.Ordered, OnDead: OnDead(rc.OnDead),
		Rate: rc.Rate, Burst: rc.Burst, Breaker: rc.Breaker, Batch: rc.Batch,
	}
	if rc.Handler != HandlerRiver {
		p.MaxAttempts = rc.MaxAttempts
	}
	return p
}

// Problems checks every rule of the route, once, for both Register and the
// routes file's parser. It returns one line per broken rule, each naming
// its field first ("url: required for handler http"), without a file or
// route prefix; none when the route is valid.
func (rc RouteConfig) Problems() []string {
	var errs []string
	if rc.Type == "" {
		errs = append(errs, "type: required")
	}
	notFor := func(field string, set bool) {
		if set {
			errs = append(errs, fmt.Sprintf("%s: not allowed for handler %s", field, rc.Handler))
		}
	}
	switch rc.Handler {
	case HandlerHTTP:
		switch _, err := checkHTTPURL(rc.URL); {
		case rc.URL == "":
			errs = append(errs, "url: required for handler http")
		case err != nil:
			errs = append(errs, "url: "+err.Error())
		}
		switch rc.IdempotencyKey {
		case "", IdempotencyKeySourceEventID, IdempotencyKeyEventID:
		default:
			errs = append(errs, fmt.Sprintf("idempotency_key: must be %s or %s, not %q",
				IdempotencyKeySourceEventID, IdempotencyKeyEventID, rc.IdempotencyKey))
		}
		notFor("kind", rc.Kind != "")
		notFor("queue", rc.Queue != "")
		notFor("priority", rc.Priority != 0)
	case HandlerIgnore, HandlerDead, HandlerRiver:
		notFor("url", rc.URL != "")
		notFor("idempotency_key", rc.IdempotencyKey != "")
		if rc.Handler == HandlerRiver {
			if rc.Kind == "" {
				errs = append(errs, "kind: required for handler river")
			}
			if rc.Priority < 0 || rc.Priority > 4 {
				errs = append(errs, fmt.Sprintf("priority: must be between 1 and 4, got %d", rc.Priority))
			}
		} else {
			notFor("kind", rc.Kind != "")
			notFor("queue", rc.Queue != "")
			notFor("priority", rc.Priority != 0)
		}
	case "":
		errs = append(errs, "handler: required (http, ignore, dead or river)")
	default:
		errs = append(errs, fmt.Sprintf("handler: unknown handler %q (want http, ignore, dead or river)", rc.Handler))
	}
	errs = append(errs, rc.Policy().validate()...)
	return append(errs, rc.Policy().checkBatch(rc.Handler == HandlerHTTP || rc.Handler == HandlerRiver)...)
}

// RegisterOptions carries the settings that Register passes to the handlers
// it builds, beyond what the routes file says.
type RegisterOptions struct {
	// Client is the HTTPConfig.Client of every http route; nil means the
	// shared client.
	Client *http.Client
	// MaxRetryAfter is the HTTPConfig.MaxRetryAfter of every http route.
	MaxRetryAfter time.Duration
	// Jobs enqueues the jobs of river routes; required when the file has
	// one (the daemon provides it).
	Jobs JobInserter
}

// NewRegistryFromRoutes returns a new Registry with r registered on it, as
// Register does.
func NewRegistryFromRoutes(r *Routes, opts RegisterOptions) (*Registry, error) {
	reg := NewRegistry()
	if err := r.Register(reg, opts); err != nil {
		return nil, err
	}
	return reg, nil
}

// HasRiverRoutes reports whether r has a river route.
func (r *Routes) HasRiverRoutes() bool {
	for _, rc := range r.Routes {
		if rc.Handler == HandlerRiver {
			return true
		}
	}
	return false
}

// Register registers a handler for every route of r on reg and sets reg's
// default to r.Default, replacing any default set before (call
// Registry.SetDefault afterwards to override it). It registers all or
// nothing: if a route cannot be built, or its type is already registered on
// reg, it returns every such error, one per line, and leaves reg unchanged.
func (r *Routes) Register(reg *Registry, opts RegisterOptions) error {
	var (
		errs    []error
		entries = make(map[string]*entry, len(r.Routes))
		dups    = r.Duplicates()
	)
	for i, rc := range r.Routes {
		prefix := fmt.Sprintf("%s: %s", r.fileName(), opfiles.RouteLabel(i+1, rc.Type))
		if first, dup := dups[i]; dup {
			errs = append(errs, fmt.Errorf("%s: type: duplicate of route %d", prefix, first))
			continue
		}
		e, err := rc.build(opts)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				errs = append(errs, fmt.Errorf("%s: %s", prefix, line))
			}
			continue
		}
		entries[rc.Type] = e
	}
	var fallback Handler
	switch r.Default {
	case "", HandlerDead:
		fallback = Dead()
	case HandlerIgnore:
		fallback = Ignore()
	default:
		errs = append(errs, fmt.Errorf("%s: default: must be dead or ignore, not %q", r.fileName(), r.Default))
	}

	reg.mu.Lock()
	defer reg.mu.Unlock()
	for i, rc := range r.Routes {
		if _, ok := reg.routes[rc.Type]; ok && entries[rc.Type] != nil {
			errs = append(errs, fmt.Errorf("%s: %s: event type %q: %w", r.fileName(), opfiles.RouteLabel(i+1, rc.Type), rc.Type, ErrDuplicate))
		}
	}
	if len(errs) > 0 {
		return opfiles.Join(r.fileName(), errs)
	}
	for t, e := range entries {
		e.wrapped = Chain(e.handler, reg.middleware...)
		reg.routes[t] = e
	}
	reg.fallback = &entry{handler: fallback, wrapped: Chain(fallback, reg.middleware...)}
	return nil
}

// Duplicates maps the index of every route whose type an earlier route
// already has to that earlier route's number (from 1); routes without a
// type are left out.
func (r *Routes) Duplicates() map[int]int {
	first := make(map[string]int, len(r.Routes))
	dups := make(map[int]int)
	for i, rc := range r.Routes {
		if rc.Type == "" {
			continue
		}
		if n, ok := first[rc.Type]; ok {
			dups[i] = n
			continue
		}
		first[rc.Type] = i + 1
	}
	return dups
}

// build checks rc and makes its route entry.
func (rc RouteConfig) build(opts RegisterOptions) (*entry, error) {
	if errs := rc.Problems(); len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	e := &entry{policy: rc.Policy()}
	switch rc.Handler {
	case HandlerHTTP:
		timeout := rc.Timeout
		if timeout == 0 {
			timeout = DefaultHTTPTimeout
		}
		h, err := NewHTTP(HTTPConfig{URL: rc.URL, Timeout: timeout, Client: opts.Client,
			MaxRetryAfter: opts.MaxRetryAfter, IdempotencyKey: rc.IdempotencyKey})
		if err != nil {
			return nil, err
		}
		e.handler = h
		if rc.Batch.MaxRows > 0 {
			e.handler, e.batch = batchOnly{}, h.(*httpHandler).batch()
		}
	case HandlerIgnore:
		e.handler = Ignore()
	case HandlerDead:
		e.handler = Dead()
	case HandlerRiver:
		if opts.Jobs == nil {
			return nil, errors.New("handler: river routes need the daemon's River connection (RegisterOptions.Jobs)")
		}
		job := Job{Kind: rc.Kind, Queue: rc.Queue, Priority: rc.Priority, MaxAttempts: rc.MaxAttempts}
		e.handler, e.tx = txAdapter{NewJobRoute(opts.Jobs, job)}, true
		if rc.Batch.MaxRows > 0 {
			e.handler, e.batch = batchOnly{}, newJobBatchRoute(opts.Jobs, job)
		}
	}
	return e, nil
}

// fileName names r's file in error messages.
func (r *Routes) fileName() string {
	if r.File == "" {
		return "routes"
	}
	return r.File
}
