// Package routesfile parses the operator's routes file (INBOXD_ROUTES),
// the map from event types to built-in handlers, into handlers.Routes. The
// file is YAML:
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
//	    batch: {max_rows: 100, max_bytes: 1048576, max_wait: 50ms}  # http and river only: rows many at a time
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
// and Parse and Load report all errors found, one per line (the first
// opfiles.MaxReported of them, then a count of the rest).
package routesfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/opfiles"
)

// MaxBytes is the largest routes file accepted, in bytes. A route takes a
// few lines, so 1 MiB holds thousands of them; a bigger file is refused
// before it is read (a 50 MB file of routes once took the daemon to 2.7 GB
// while it was parsed).
const MaxBytes = 1 << 20

// Load reads and parses the routes file at path; its errors name the file
// as path. A file larger than MaxBytes is refused before it is read.
func Load(path string) (*handlers.Routes, error) {
	data, err := opfiles.Read(path, MaxBytes)
	switch {
	case errors.Is(err, opfiles.ErrTooLarge):
		return nil, err // names the file
	case err != nil:
		return nil, fmt.Errorf("read routes: %w", err)
	}
	return parse(path, data)
}

// Parse parses the content of a routes file; its errors name the file as
// "routes file".
func Parse(data []byte) (*handlers.Routes, error) {
	return parse("routes file", data)
}

// routesParser collects the errors of one routes file.
type routesParser struct {
	name string
	errs []error
}

// errorf records an error about the whole file, or a field outside the
// routes list, at line (0: no line).
func (p *routesParser) errorf(line int, format string, args ...any) {
	p.errs = append(p.errs, opfiles.Errorf(p.name, line, format, args...))
}

// parseRoutes parses data, naming the file name in errors. It walks the
// YAML node tree itself rather than decoding into structs, so that every
// error, unknown fields included, can name its route.
func parse(name string, data []byte) (*handlers.Routes, error) {
	if len(data) > MaxBytes {
		return nil, opfiles.TooLarge(name, int64(len(data)), MaxBytes)
	}
	p := &routesParser{name: name}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: file is empty: want a mapping with routes and default", name)
		}
		return nil, opfiles.YAMLError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, opfiles.YAMLError(name, err)
		}
		return nil, opfiles.Errorf(name, extra.Line, "more than one YAML document")
	}

	r := &handlers.Routes{Default: handlers.HandlerDead, File: name}
	root := resolve(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = resolve(root.Content[0])
	}
	if isNull(root) {
		return nil, fmt.Errorf("%s: file is empty: want a mapping with routes and default", name)
	}
	if root.Kind != yaml.MappingNode {
		return nil, opfiles.Errorf(name, root.Line, "want a mapping with routes and default")
	}

	seen := make(map[string]bool)
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := resolve(root.Content[i]), resolve(root.Content[i+1])
		if key.Kind != yaml.ScalarNode {
			p.errorf(key.Line, "keys must be plain names")
			continue
		}
		if seen[key.Value] {
			name := key.Value
			if name != "routes" && name != "default" {
				name = strconv.Quote(name) // unknown: may hold a newline
			}
			p.errorf(key.Line, "%s: given twice", name)
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
				p.errorf(0, "default: must be dead or ignore")
			case s == "":
				// Omitted: dead.
			case s == handlers.HandlerDead || s == handlers.HandlerIgnore:
				r.Default = s
			default:
				p.errorf(0, "default: must be dead or ignore, not %q", s)
			}
		default:
			p.errorf(key.Line, "unknown field %q (want routes, default)", key.Value)
		}
	}
	if len(p.errs) > 0 {
		return nil, opfiles.Join(p.name, p.errs)
	}
	return r, nil
}

// parseList parses the routes list into r.Routes.
func (p *routesParser) parseList(r *handlers.Routes, list *yaml.Node) {
	if isNull(list) {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.errorf(list.Line, "routes: must be a list")
		return
	}
	parsed := make([]handlers.RouteConfig, len(list.Content))
	errsOf := make([][]string, len(list.Content))
	for i, item := range list.Content {
		parsed[i], errsOf[i] = parseRoute(resolve(item))
	}
	for i, first := range (&handlers.Routes{Routes: parsed}).Duplicates() {
		errsOf[i] = append([]string{fmt.Sprintf("type: duplicate of route %d", first)}, errsOf[i]...)
	}
	for i, rc := range parsed {
		errs := errsOf[i]
		label := opfiles.RouteLabel(i+1, rc.Type)
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
// RouteConfig.Problems. It returns what it could read, its type included
// (for the error label), and the errors found, each without the file and
// route prefix.
func parseRoute(item *yaml.Node) (handlers.RouteConfig, []string) {
	var rc handlers.RouteConfig
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
			if key.Value == "breaker" || key.Value == "batch" {
				values[key.Value] = ""
				var berrs []string
				if key.Value == "breaker" {
					rc.Breaker, berrs = parseBreaker(val)
				} else {
					rc.Batch, berrs = parseBatch(val)
				}
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
	if rc.Handler == handlers.HandlerHTTP && rc.Timeout == 0 && values["timeout"] == "" {
		rc.Timeout = handlers.DefaultHTTPTimeout
	}
	if bad("handler") {
		// The handler's own rules cannot be checked; report the shape only.
		return rc, errs
	}
	for _, p := range rc.Problems() {
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
	if n/per > handlers.MaxRate {
		return 0, fmt.Errorf("must be at most %d/s, got %q", handlers.MaxRate, s)
	}
	return n / per, nil
}

// breakerFields are the fields of a route's breaker.
var breakerFields = []string{"failures", "cool_down"}

// parseBreaker parses a route's breaker mapping ({failures: 5, cool_down:
// 30s}); both fields are required. Its errors name the field as
// "breaker: failures: ...".
func parseBreaker(n *yaml.Node) (handlers.Breaker, []string) {
	var b handlers.Breaker
	values, errs := subMapping(n, "breaker", breakerFields, "{failures: 5, cool_down: 30s}")
	if values == nil {
		return b, errs
	}
	for _, f := range breakerFields {
		s, ok := values[f]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("breaker: %s: required", f))
		case s == "":
		case f == "failures":
			n, err := strconv.Atoi(s)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("breaker: failures: %q is not a whole number", s))
			case n < 1 || n > handlers.MaxBreakerFailures:
				errs = append(errs, fmt.Sprintf("breaker: failures: must be between 1 and %d, got %d", handlers.MaxBreakerFailures, n))
			default:
				b.Failures = n
			}
		case f == "cool_down":
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("breaker: cool_down: %q is not a Go duration such as 30s or 1m", s))
			case d <= 0 || d > handlers.MaxCoolDown:
				errs = append(errs, fmt.Sprintf("breaker: cool_down: must be greater than 0 and at most %s", handlers.MaxCoolDown))
			default:
				b.CoolDown = d
			}
		}
	}
	if len(errs) > 0 {
		return handlers.Breaker{}, errs
	}
	return b, nil
}

// subMapping reads a route's field that is a mapping of scalars (breaker,
// batch) into its values by name: an unknown field, one given twice or
// one without a value is an error naming the field as "field: name: ...",
// and such a field's value is "" (a field left out is absent). values is
// nil when n is not a mapping at all (example shows one).
func subMapping(n *yaml.Node, field string, fields []string, example string) (values map[string]string, errs []string) {
	if isNull(n) || n.Kind != yaml.MappingNode {
		list := strings.Join(fields[:len(fields)-1], ", ") + " and " + fields[len(fields)-1]
		return nil, []string{fmt.Sprintf("%s: must be a mapping with %s, such as %s", field, list, example)}
	}
	values = make(map[string]string, len(fields))
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := resolve(n.Content[i]), resolve(n.Content[i+1])
		if key.Kind != yaml.ScalarNode || !slices.Contains(fields, key.Value) {
			errs = append(errs, fmt.Sprintf("%s: unknown field %q (want %s)", field, key.Value, strings.Join(fields, ", ")))
			continue
		}
		if _, dup := values[key.Value]; dup {
			errs = append(errs, fmt.Sprintf("%s: %s: given twice", field, key.Value))
			continue
		}
		s, ok := scalarValue(val)
		if !ok || s == "" {
			errs = append(errs, fmt.Sprintf("%s: %s: must be a value", field, key.Value))
			s = ""
		}
		values[key.Value] = s
	}
	return values, errs
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
