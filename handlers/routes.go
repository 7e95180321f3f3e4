package handlers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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
)

const (
	// DefaultHTTPTimeout is the timeout of an http route that names none.
	DefaultHTTPTimeout = 10 * time.Second
	// MaxHTTPTimeout is the longest timeout an http route may name.
	MaxHTTPTimeout = 10 * time.Minute
)

// Routes is a parsed routes file, the operator's map from event types to
// built-in handlers (INBOXD_ROUTES). The file is YAML:
//
//	routes:
//	  - type: order.created        # exact event type; required, unique
//	    handler: http              # http, ignore or dead; required
//	    url: http://orders.internal/hooks/inbox  # http only; required there
//	    timeout: 10s               # http only; Go duration, > 0 and <= 10m; default 10s
//	    idempotency_key: source_event_id  # http only; or event_id; default source_event_id
//	  - type: order.audited
//	    handler: ignore            # processed, nothing done
//	default: dead                  # unmatched types: dead (when omitted) or ignore
//
// Parsing is strict: unknown fields, a url, timeout or idempotency_key on a
// route whose handler is not http, an idempotency_key other than
// source_event_id or event_id (see HTTPConfig.IdempotencyKey), repeated types and a default other than dead or
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
	// Handler is the handler kind: HandlerHTTP, HandlerIgnore or
	// HandlerDead.
	Handler string
	// URL is where an http route POSTs events; it is empty for other kinds.
	URL string
	// Timeout bounds each request of an http route; it is zero for other
	// kinds. The parser sets DefaultHTTPTimeout when an http route names
	// none; Register treats zero the same way.
	Timeout time.Duration
	// IdempotencyKey is the HTTPConfig.IdempotencyKey of an http route:
	// IdempotencyKeySourceEventID, IdempotencyKeyEventID, or empty (the
	// file names none) for IdempotencyKeySourceEventID. It is empty for
	// other kinds.
	IdempotencyKey string
}

// RouteOptions carries the settings that Register passes to every handler
// it builds, beyond what the routes file says.
type RouteOptions struct {
	// Client is the HTTPConfig.Client of every http route; nil means the
	// shared client.
	Client *http.Client
	// MaxRetryAfter is the HTTPConfig.MaxRetryAfter of every http route.
	MaxRetryAfter time.Duration
}

// LoadRoutes reads and parses the routes file at path; its errors name the
// file as path. See Routes for the format.
func LoadRoutes(path string) (*Routes, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	return parseRoutes(path, data)
}

// ParseRoutes parses the content of a routes file; its errors name the file
// as "routes file". See Routes for the format.
func ParseRoutes(data []byte) (*Routes, error) {
	return parseRoutes("routes file", data)
}

// NewRegistryFromRoutes returns a new Registry with r registered on it, as
// Register does.
func NewRegistryFromRoutes(r *Routes, opts RouteOptions) (*Registry, error) {
	reg := NewRegistry()
	if err := r.Register(reg, opts); err != nil {
		return nil, err
	}
	return reg, nil
}

// Register registers a handler for every route of r on reg and sets reg's
// default to r.Default, replacing any default set before (call
// Registry.SetDefault afterwards to override it). It registers all or
// nothing: if a route cannot be built, or its type is already registered on
// reg, it returns every such error, one per line, and leaves reg unchanged.
func (r *Routes) Register(reg *Registry, opts RouteOptions) error {
	type built struct {
		eventType string
		handler   Handler
	}
	var (
		errs   []error
		routes = make([]built, 0, len(r.Routes))
	)
	for i, rc := range r.Routes {
		h, err := rc.build(opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", r.fileName(), routeLabel(i+1, rc.Type), err))
			continue
		}
		routes = append(routes, built{rc.Type, h})
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
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	reg.mu.Lock()
	defer reg.mu.Unlock()
	seen := make(map[string]int, len(r.Routes))
	for i, rc := range r.Routes {
		if j, ok := seen[rc.Type]; ok {
			errs = append(errs, fmt.Errorf("%s: %s: type: duplicate of route %d", r.fileName(), routeLabel(i+1, rc.Type), j))
			continue
		}
		seen[rc.Type] = i + 1
		if _, ok := reg.routes[rc.Type]; ok {
			errs = append(errs, fmt.Errorf("%s: %s: event type %q: %w", r.fileName(), routeLabel(i+1, rc.Type), rc.Type, ErrDuplicate))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, b := range routes {
		reg.routes[b.eventType] = Route{Handler: b.handler}
	}
	reg.fallback = Route{Handler: fallback}
	return nil
}

// build makes the handler rc names.
func (rc RouteConfig) build(opts RouteOptions) (Handler, error) {
	if rc.Type == "" {
		return nil, errors.New("type: required")
	}
	switch rc.Handler {
	case HandlerHTTP:
		timeout := rc.Timeout
		if timeout == 0 {
			timeout = DefaultHTTPTimeout
		}
		if timeout > MaxHTTPTimeout {
			return nil, fmt.Errorf("timeout: must be at most %s", MaxHTTPTimeout)
		}
		return NewHTTP(HTTPConfig{URL: rc.URL, Timeout: timeout, Client: opts.Client, MaxRetryAfter: opts.MaxRetryAfter, IdempotencyKey: rc.IdempotencyKey})
	case HandlerIgnore, HandlerDead:
		if rc.URL != "" {
			return nil, fmt.Errorf("url: not allowed for handler %s", rc.Handler)
		}
		if rc.Timeout != 0 {
			return nil, fmt.Errorf("timeout: not allowed for handler %s", rc.Handler)
		}
		if rc.IdempotencyKey != "" {
			return nil, fmt.Errorf("idempotency_key: not allowed for handler %s", rc.Handler)
		}
		if rc.Handler == HandlerIgnore {
			return Ignore(), nil
		}
		return Dead(), nil
	case "":
		return nil, errors.New("handler: required (http, ignore or dead)")
	default:
		return nil, fmt.Errorf("handler: unknown handler %q (want http, ignore or dead)", rc.Handler)
	}
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
		return nil, errors.Join(p.errs...)
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
	byType := make(map[string]int)
	for i, item := range list.Content {
		n := i + 1
		rc, errs := parseRoute(resolve(item))
		label := routeLabel(n, rc.Type)
		if rc.Type != "" {
			if first, ok := byType[rc.Type]; ok {
				errs = append(errs, fmt.Sprintf("type: duplicate of route %d", first))
			} else {
				byType[rc.Type] = n
			}
		}
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
var routeFields = [...]string{"type", "handler", "url", "timeout", "idempotency_key"}

// parseRoute parses one route. It returns what it could read, its type
// included (for the error label), and the errors found, each without the
// file and route prefix.
func parseRoute(item *yaml.Node) (RouteConfig, []string) {
	var rc RouteConfig
	if item.Kind != yaml.MappingNode {
		return rc, []string{"must be a mapping with type, handler, url, timeout, idempotency_key"}
	}
	var (
		errs   []string
		values = make(map[string]string)
		bad    = make(map[string]bool) // present but not a string
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
			errs = append(errs, fmt.Sprintf("unknown field %q (want type, handler, url, timeout, idempotency_key)", key.Value))
		default:
			if _, dup := values[key.Value]; dup {
				errs = append(errs, fmt.Sprintf("%s: given twice", key.Value))
				continue
			}
			s, ok := scalarValue(val)
			if !ok {
				errs = append(errs, fmt.Sprintf("%s: must be a string", key.Value))
				bad[key.Value] = true
			}
			values[key.Value] = s
		}
	}

	rc.Type, rc.Handler, rc.URL, rc.IdempotencyKey = values["type"], values["handler"], values["url"], values["idempotency_key"]
	timeout := values["timeout"]
	if rc.Type == "" && !bad["type"] {
		errs = append(errs, "type: required")
	}
	switch {
	case bad["handler"]:
		// Reported above.
	case rc.Handler == HandlerHTTP:
		switch _, err := checkHTTPURL(rc.URL); {
		case bad["url"]:
			// Reported above.
		case rc.URL == "":
			errs = append(errs, "url: required for handler http")
		case err != nil:
			errs = append(errs, "url: "+err.Error())
		}
		rc.Timeout = DefaultHTTPTimeout
		if timeout != "" {
			d, err := time.ParseDuration(timeout)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("timeout: %q is not a Go duration such as 10s or 1m30s", timeout))
			case d <= 0:
				errs = append(errs, "timeout: must be greater than 0")
			case d > MaxHTTPTimeout:
				errs = append(errs, fmt.Sprintf("timeout: must be at most %s", MaxHTTPTimeout))
			default:
				rc.Timeout = d
			}
		}
		switch rc.IdempotencyKey {
		case "", IdempotencyKeySourceEventID, IdempotencyKeyEventID:
		default:
			errs = append(errs, fmt.Sprintf("idempotency_key: must be %s or %s, not %q", IdempotencyKeySourceEventID, IdempotencyKeyEventID, rc.IdempotencyKey))
		}
	case rc.Handler == HandlerIgnore || rc.Handler == HandlerDead:
		if rc.URL != "" {
			errs = append(errs, fmt.Sprintf("url: not allowed for handler %s", rc.Handler))
		}
		if timeout != "" {
			errs = append(errs, fmt.Sprintf("timeout: not allowed for handler %s", rc.Handler))
		}
		if rc.IdempotencyKey != "" {
			errs = append(errs, fmt.Sprintf("idempotency_key: not allowed for handler %s", rc.Handler))
		}
	case rc.Handler == "":
		errs = append(errs, "handler: required (http, ignore or dead)")
	default:
		errs = append(errs, fmt.Sprintf("handler: unknown handler %q (want http, ignore or dead)", rc.Handler))
	}
	return rc, errs
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
