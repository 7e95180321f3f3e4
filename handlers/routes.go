package handlers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
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

// Routes is a parsed routes file, the operator's map from event types to
// built-in handlers (INBOXD_ROUTES). The file is YAML:
//
//	routes:
//	  - type: order.created        # exact event type; required, unique
//	    handler: http              # http, ignore, dead or river; required
//	    url: http://orders.internal/hooks/inbox  # http only; required there
//	    timeout: 10s               # bounds each attempt (http: each request; default 10s there)
//	    idempotency_key: source_event_id  # http only; or event_id; default source_event_id
//	    concurrency: 8             # most rows of the route in handlers at once (default INBOXD_WORKERS)
//	    max_attempts: 5            # default INBOXD_MAX_ATTEMPTS (river: the River job's max attempts)
//	    backoff_base: 2s           # default INBOXD_BACKOFF_BASE
//	    backoff_max: 10m           # default INBOXD_BACKOFF_MAX
//	    ordered: true              # rows with the same (source, key) in arrival order, one at a time
//	    on_dead: block             # ordered only: block (default) or skip
//	    rate: 50/s                 # most rows a second (or /m a minute) for the whole fleet
//	    burst: 50                  # with rate: the bucket's size (default one second's worth, at least 1)
//	    breaker: {failures: 5, cool_down: 30s}  # per replica: no claims for cool_down after 5 failures in a row
//	  - type: payment.captured
//	    handler: river             # a River job, enqueued with the row's move to processed
//	    kind: payment_captured     # river only; required there
//	    queue: default             # river only; default "default"
//	    priority: 1                # river only; 1 (highest) to 4; default 1
//	  - type: order.audited
//	    handler: ignore            # processed, nothing done
//	default: dead                  # unmatched types: dead (when omitted) or ignore
//
// Parsing is strict: unknown fields, a field that does not belong to the
// route's handler (url on ignore, kind on http, on_dead without ordered),
// values out of range, repeated types and a default other than dead or
// ignore are errors. A file with no YAML document at all (empty, or only
// comments) is an error, since that is far more often a broken mount than
// an intent; a file that says so explicitly, such as "routes: []" or just
// "default: ignore", is valid and routes every type to the default.
//
// Every error names the file and, where there is one, the route at fault,
// numbered from 1, with its type:
//
//	routes.yaml: route 2 (type "order.created"): url: must be an absolute http or https URL
//
// and ParseRoutes and LoadRoutes report all errors found, one per line.
type Routes struct {
	// Routes lists the routes in file order.
	Routes []RouteConfig
	// Default is the handler kind for event types without a route:
	// HandlerDead or HandlerIgnore. The parser sets it to HandlerDead when
	// the file names none; Register treats an empty Default the same way.
	Default string

	// name is the file name used in error messages.
	name string
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
	// an http route POSTs its rows as one JSON array (NewHTTPBatch), a
	// river route inserts their jobs with one InsertManyTx.
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

// problems checks every rule of a route, once, for both the parser and
// Register; each error names its field, without the file and route prefix.
func (rc RouteConfig) problems() []string {
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

// MaxRoutesFileBytes is the largest routes file accepted, in bytes. A
// route takes a few lines, so 1 MiB holds thousands of them; a bigger file
// is refused before it is read (a 50 MB file of routes once took the daemon
// to 2.7 GB while it was parsed).
const MaxRoutesFileBytes = 1 << 20

// MaxReportedErrors is how many errors a routes file's check reports; the
// rest are counted on one more line ("and K more errors"), so a broken file
// cannot make a log line of hundreds of megabytes.
const MaxReportedErrors = 20

// maxErrorLineBytes bounds one reported error line (a route's field may
// quote a value of the file).
const maxErrorLineBytes = 1000

// LoadRoutes reads and parses the routes file at path; its errors name the
// file as path. See Routes for the format. A file larger than
// MaxRoutesFileBytes is refused before it is read.
func LoadRoutes(path string) (*Routes, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxRoutesFileBytes {
		return nil, tooLarge(path, fi.Size())
	}
	// The file may grow after the stat, or not be a regular file: read one
	// byte past the limit at most.
	data, err := io.ReadAll(io.LimitReader(f, MaxRoutesFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	return parseRoutes(path, data)
}

// tooLarge is the error for a routes file of size bytes, over
// MaxRoutesFileBytes.
func tooLarge(name string, size int64) error {
	return fmt.Errorf("%s: file of %d bytes is larger than the limit of %d bytes", name, size, MaxRoutesFileBytes)
}

// JoinErrors joins errs one per line, as errors.Join does, but reports the
// first MaxReportedErrors of them only (each line cut to a thousand bytes),
// then one line "<name>: and K more errors". It returns nil when errs is
// empty. The errors reported stay reachable through errors.Is and
// errors.As.
func JoinErrors(name string, errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	shown := make([]error, 0, min(len(errs), MaxReportedErrors)+1)
	for _, err := range errs[:min(len(errs), MaxReportedErrors)] {
		if msg := err.Error(); len(msg) > maxErrorLineBytes {
			// Cut, keeping what the error wraps.
			err = cutError{err: err, msg: strings.ToValidUTF8(msg[:maxErrorLineBytes], "") + "…"}
		}
		shown = append(shown, err)
	}
	if more := len(errs) - len(shown); more > 0 {
		shown = append(shown, fmt.Errorf("%s: and %d more errors", name, more))
	}
	return errors.Join(shown...)
}

// cutError is an error whose message was shortened for a report.
type cutError struct {
	err error
	msg string
}

func (e cutError) Error() string { return e.msg }
func (e cutError) Unwrap() error { return e.err }

// ParseRoutes parses the content of a routes file; its errors name the file
// as "routes file". See Routes for the format.
func ParseRoutes(data []byte) (*Routes, error) {
	return parseRoutes("routes file", data)
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
		dups    = duplicates(r.Routes)
	)
	for i, rc := range r.Routes {
		prefix := fmt.Sprintf("%s: %s", r.fileName(), routeLabel(i+1, rc.Type))
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
			errs = append(errs, fmt.Errorf("%s: %s: event type %q: %w", r.fileName(), routeLabel(i+1, rc.Type), rc.Type, ErrDuplicate))
		}
	}
	if len(errs) > 0 {
		return JoinErrors(r.fileName(), errs)
	}
	for t, e := range entries {
		e.wrapped = Chain(e.handler, reg.middleware...)
		reg.routes[t] = e
	}
	reg.fallback = &entry{handler: fallback, wrapped: Chain(fallback, reg.middleware...)}
	return nil
}

// duplicates maps the index of every route whose type an earlier route
// already has to that earlier route's number (from 1).
func duplicates(routes []RouteConfig) map[int]int {
	first := make(map[string]int, len(routes))
	dups := make(map[int]int)
	for i, rc := range routes {
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
	if errs := rc.problems(); len(errs) > 0 {
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
			e.handler, e.batch = batchOnly{}, NewJobBatchRoute(opts.Jobs, job)
		}
	}
	return e, nil
}

// fileName names r's file in error messages.
func (r *Routes) fileName() string {
	if r.name == "" {
		return "routes"
	}
	return r.name
}

// routeLabel names the n-th route (from 1) in error messages.
func routeLabel(n int, eventType string) string {
	if eventType == "" {
		return fmt.Sprintf("route %d", n)
	}
	return fmt.Sprintf("route %d (type %q)", n, eventType)
}

// routesParser collects the errors of one routes file.
type routesParser struct {
	name string
	errs []error
}

// errorf records an error about the whole file, or a field outside the
// routes list.
func (p *routesParser) errorf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", p.name, fmt.Sprintf(format, args...)))
}

// parseRoutes parses data, naming the file name in errors. It walks the
// YAML node tree itself rather than decoding into structs, so that every
// error, unknown fields included, can name its route.
func parseRoutes(name string, data []byte) (*Routes, error) {
	if len(data) > MaxRoutesFileBytes {
		return nil, tooLarge(name, int64(len(data)))
	}
	p := &routesParser{name: name}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: file is empty: want a mapping with routes and default", name)
		}
		return nil, fmt.Errorf("%s: %s", name, oneLine(err.Error()))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("%s: %s", name, oneLine(err.Error()))
		}
		return nil, fmt.Errorf("%s: line %d: more than one YAML document", name, extra.Line)
	}

	r := &Routes{Default: HandlerDead, name: name}
	root := resolve(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = resolve(root.Content[0])
	}
	if isNull(root) {
		return nil, fmt.Errorf("%s: file is empty: want a mapping with routes and default", name)
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: line %d: want a mapping with routes and default", name, root.Line)
	}

	seen := make(map[string]bool)
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := resolve(root.Content[i]), resolve(root.Content[i+1])
		if key.Kind != yaml.ScalarNode {
			p.errorf("line %d: keys must be plain names", key.Line)
			continue
		}
		if seen[key.Value] {
			name := key.Value
			if name != "routes" && name != "default" {
				name = strconv.Quote(name) // unknown: may hold a newline
			}
			p.errorf("line %d: %s: given twice", key.Line, name)
			continue
		}
		seen[key.Value] = true
		switch key.Value {
		case "routes":
			p.parseList(r, val)
		case "default":
			s, ok := scalarValue(val)
			switch {
			case !ok:
				p.errorf("default: must be dead or ignore")
			case s == "":
				// Omitted: dead.
			case s == HandlerDead || s == HandlerIgnore:
				r.Default = s
			default:
				p.errorf("default: must be dead or ignore, not %q", s)
			}
		default:
			p.errorf("line %d: unknown field %q (want routes, default)", key.Line, key.Value)
		}
	}
	if len(p.errs) > 0 {
		return nil, JoinErrors(p.name, p.errs)
	}
	return r, nil
}

// parseList parses the routes list into r.Routes.
func (p *routesParser) parseList(r *Routes, list *yaml.Node) {
	if isNull(list) {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.errorf("line %d: routes: must be a list", list.Line)
		return
	}
	parsed := make([]RouteConfig, len(list.Content))
	errsOf := make([][]string, len(list.Content))
	for i, item := range list.Content {
		parsed[i], errsOf[i] = parseRoute(resolve(item))
	}
	for i, first := range duplicates(parsed) {
		errsOf[i] = append([]string{fmt.Sprintf("type: duplicate of route %d", first)}, errsOf[i]...)
	}
	for i, rc := range parsed {
		errs := errsOf[i]
		label := routeLabel(i+1, rc.Type)
		for _, e := range errs {
			p.errs = append(p.errs, fmt.Errorf("%s: %s: %s", p.name, label, e))
		}
		if len(errs) == 0 {
			r.Routes = append(r.Routes, rc)
		}
	}
}

// routeFields are the fields of a route, in the order its errors are
// reported.
var routeFields = [...]string{
	"type", "handler", "url", "timeout", "idempotency_key", "concurrency", "max_attempts",
	"backoff_base", "backoff_max", "ordered", "on_dead", "kind", "queue", "priority",
	"rate", "burst", "breaker", "batch",
}

// parseRoute parses one route: it reads the fields into a RouteConfig
// (reporting what is not of the right shape: unknown, repeated, not a
// string, not a number, not a duration) and then checks its rules with
// RouteConfig.problems. It returns what it could read, its type included
// (for the error label), and the errors found, each without the file and
// route prefix.
func parseRoute(item *yaml.Node) (RouteConfig, []string) {
	var rc RouteConfig
	if item.Kind != yaml.MappingNode {
		return rc, []string{"must be a mapping with " + strings.Join(routeFields[:], ", ")}
	}
	var (
		errs   []string
		values = make(map[string]string)
	)
	for i := 0; i+1 < len(item.Content); i += 2 {
		key, val := resolve(item.Content[i]), resolve(item.Content[i+1])
		known := false
		for _, f := range routeFields {
			known = known || key.Value == f
		}
		switch {
		case key.Kind != yaml.ScalarNode:
			errs = append(errs, "keys must be plain names")
		case !known:
			errs = append(errs, fmt.Sprintf("unknown field %q (want %s)", key.Value, strings.Join(routeFields[:], ", ")))
		default:
			if _, dup := values[key.Value]; dup {
				errs = append(errs, fmt.Sprintf("%s: given twice", key.Value))
				continue
			}
			if key.Value == "batch" {
				var berrs []string
				rc.Batch, berrs = parseBatch(val)
				errs = append(errs, berrs...)
				values[key.Value] = ""
				if len(berrs) > 0 {
					values[key.Value] = "\x00bad"
				}
				continue
			}
			if key.Value == "breaker" {
				values[key.Value] = ""
				var berrs []string
				rc.Breaker, berrs = parseBreaker(val)
				errs = append(errs, berrs...)
				if len(berrs) > 0 {
					values[key.Value] = "\x00bad"
				}
				continue
			}
			s, ok := scalarValue(val)
			if !ok {
				errs = append(errs, fmt.Sprintf("%s: must be a string", key.Value))
				s = "\x00bad"
			}
			values[key.Value] = s
		}
	}
	bad := func(field string) bool { return values[field] == "\x00bad" }
	str := func(field string) string {
		if bad(field) {
			return ""
		}
		return values[field]
	}
	rc.Type, rc.Handler, rc.URL = str("type"), str("handler"), str("url")
	rc.IdempotencyKey, rc.OnDead, rc.Kind, rc.Queue = str("idempotency_key"), str("on_dead"), str("kind"), str("queue")
	duration := func(field string, dst *time.Duration) {
		if s := str(field); s != "" {
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("%s: %q is not a Go duration such as 10s or 1m30s", field, s))
			case d <= 0:
				errs = append(errs, fmt.Sprintf("%s: must be greater than 0", field))
			default:
				*dst = d
			}
		}
	}
	number := func(field string, dst *int) {
		if s := str(field); s != "" {
			n, err := strconv.Atoi(s)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("%s: %q is not a whole number", field, s))
			case n < 1:
				errs = append(errs, fmt.Sprintf("%s: must be at least 1, got %d", field, n))
			default:
				*dst = n
			}
		}
	}
	duration("timeout", &rc.Timeout)
	duration("backoff_base", &rc.BackoffBase)
	duration("backoff_max", &rc.BackoffMax)
	number("concurrency", &rc.Concurrency)
	number("max_attempts", &rc.MaxAttempts)
	number("priority", &rc.Priority)
	number("burst", &rc.Burst)
	if s := str("rate"); s != "" {
		r, err := parseRate(s)
		if err != nil {
			errs = append(errs, "rate: "+err.Error())
		} else {
			rc.Rate = r
		}
	}
	switch s := str("ordered"); s {
	case "", "false":
	case "true":
		rc.Ordered = true
	default:
		errs = append(errs, fmt.Sprintf("ordered: must be true or false, not %q", s))
	}
	if rc.Handler == HandlerHTTP && rc.Timeout == 0 && values["timeout"] == "" {
		rc.Timeout = DefaultHTTPTimeout
	}
	if bad("handler") {
		// The handler's own rules cannot be checked; report the shape only.
		return rc, errs
	}
	for _, p := range rc.problems() {
		field, _, _ := strings.Cut(p, ":")
		if bad(field) || (field == "burst" && values["rate"] != "" && rc.Rate == 0) {
			continue // its shape (or its rate's) is already reported
		}
		errs = append(errs, p)
	}
	// Report in field order, whichever check found the error.
	slices.SortStableFunc(errs, func(a, b string) int { return fieldRank(a) - fieldRank(b) })
	return rc, errs
}

// parseRate parses a rate limit: a positive number of rows per second
// ("50/s") or per minute ("3000/m"), returned per second.
func parseRate(s string) (float64, error) {
	num, unit, ok := strings.Cut(s, "/")
	per := map[string]float64{"s": 1, "m": 60}[unit]
	if !ok || per == 0 {
		return 0, fmt.Errorf("%q is not a rate such as 50/s or 3000/m", s)
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" || strings.ContainsAny(num, "eExXpPnN_+-") {
		return 0, fmt.Errorf("%q is not a rate such as 50/s or 3000/m", s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("must be greater than 0, got %q", s)
	}
	if n/per > MaxRate {
		return 0, fmt.Errorf("must be at most %d/s, got %q", MaxRate, s)
	}
	return n / per, nil
}

// breakerFields are the fields of a route's breaker.
var breakerFields = [...]string{"failures", "cool_down"}

// parseBreaker parses a route's breaker mapping ({failures: 5, cool_down:
// 30s}); both fields are required. Its errors name the field as
// "breaker: failures: ...".
func parseBreaker(n *yaml.Node) (Breaker, []string) {
	var b Breaker
	if isNull(n) || n.Kind != yaml.MappingNode {
		return b, []string{"breaker: must be a mapping with failures and cool_down, such as {failures: 5, cool_down: 30s}"}
	}
	var errs []string
	seen := make(map[string]bool)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := resolve(n.Content[i]), resolve(n.Content[i+1])
		if key.Kind != yaml.ScalarNode || !slices.Contains(breakerFields[:], key.Value) {
			errs = append(errs, fmt.Sprintf("breaker: unknown field %q (want failures, cool_down)", key.Value))
			continue
		}
		if seen[key.Value] {
			errs = append(errs, fmt.Sprintf("breaker: %s: given twice", key.Value))
			continue
		}
		seen[key.Value] = true
		s, ok := scalarValue(val)
		if !ok || s == "" {
			errs = append(errs, fmt.Sprintf("breaker: %s: must be a value", key.Value))
			continue
		}
		switch key.Value {
		case "failures":
			f, err := strconv.Atoi(s)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("breaker: failures: %q is not a whole number", s))
			case f < 1 || f > MaxBreakerFailures:
				errs = append(errs, fmt.Sprintf("breaker: failures: must be between 1 and %d, got %d", MaxBreakerFailures, f))
			default:
				b.Failures = f
			}
		case "cool_down":
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("breaker: cool_down: %q is not a Go duration such as 30s or 1m", s))
			case d <= 0 || d > MaxCoolDown:
				errs = append(errs, fmt.Sprintf("breaker: cool_down: must be greater than 0 and at most %s", MaxCoolDown))
			default:
				b.CoolDown = d
			}
		}
	}
	for _, f := range breakerFields {
		if !seen[f] {
			errs = append(errs, fmt.Sprintf("breaker: %s: required", f))
		}
	}
	if len(errs) > 0 {
		return Breaker{}, errs
	}
	return b, nil
}

// fieldRank is the position of the field an error names in routeFields
// (errors about no single field come first).
func fieldRank(err string) int {
	field, _, _ := strings.Cut(err, ":")
	for i, f := range routeFields {
		if f == field {
			return i + 1
		}
	}
	return 0
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is missing or an explicit null (`~`, `null`, or
// nothing after the colon).
func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// scalarValue returns the text of a scalar node ("" for null); ok is false
// for lists and mappings.
func scalarValue(n *yaml.Node) (s string, ok bool) {
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		return "", false
	}
	return n.Value, true
}

// oneLine joins the lines of a multi-line message with "; ".
func oneLine(s string) string {
	parts := strings.Split(s, "\n")
	out := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
