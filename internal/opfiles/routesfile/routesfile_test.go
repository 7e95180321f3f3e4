package routesfile_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/opfiles/routesfile"
)

func TestLoadGood(t *testing.T) {
	t.Parallel()
	r, err := routesfile.Load("testdata/routes.good.yml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := []handlers.RouteConfig{
		{Type: "order.created", Handler: "http", URL: "http://orders.internal/hooks/inbox", Timeout: 2 * time.Second, IdempotencyKey: handlers.IdempotencyKeySourceEventID},
		{Type: "order.paid", Handler: "http", URL: "https://user:secret@payments.internal:8443/inbox?token=abc", Timeout: handlers.DefaultHTTPTimeout, IdempotencyKey: handlers.IdempotencyKeyEventID},
		{Type: "order.audited", Handler: "ignore"},
		{Type: "order.broken", Handler: "dead"},
	}
	if !reflect.DeepEqual(r.Routes, want) {
		t.Errorf("Routes = %+v\nwant     %+v", r.Routes, want)
	}
	if r.Default != handlers.HandlerIgnore {
		t.Errorf("Default = %q, want ignore", r.Default)
	}
}

func TestParseValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		yaml        string
		wantRoutes  []handlers.RouteConfig
		wantDefault string
	}{
		{
			name: "design example",
			yaml: `
routes:
  - type: order.created
    handler: http
    url: http://orders.internal/hooks/inbox
    timeout: 10s
  - type: order.audited
    handler: ignore        # processed, nothing done
default: dead              # unmatched types: dead (default) or ignore
`,
			wantRoutes: []handlers.RouteConfig{
				{Type: "order.created", Handler: "http", URL: "http://orders.internal/hooks/inbox", Timeout: 10 * time.Second},
				{Type: "order.audited", Handler: "ignore"},
			},
			wantDefault: "dead",
		},
		{name: "default omitted", yaml: "routes:\n  - {type: a, handler: ignore}\n", wantRoutes: []handlers.RouteConfig{{Type: "a", Handler: "ignore"}}, wantDefault: "dead"},
		{name: "default null", yaml: "routes: []\ndefault:\n", wantDefault: "dead"},
		{name: "no routes", yaml: "routes: []\n", wantDefault: "dead"},
		{name: "only default", yaml: "default: ignore\n", wantDefault: "ignore"},
		{name: "routes null", yaml: "routes:\ndefault: ignore\n", wantDefault: "ignore"},
		{
			name: "timeout bounds",
			yaml: "routes:\n  - {type: a, handler: http, url: 'https://h/x', timeout: 1ms}\n  - {type: b, handler: http, url: 'https://h/y', timeout: 10m}\n",
			wantRoutes: []handlers.RouteConfig{
				{Type: "a", Handler: "http", URL: "https://h/x", Timeout: time.Millisecond},
				{Type: "b", Handler: "http", URL: "https://h/y", Timeout: 10 * time.Minute},
			},
			wantDefault: "dead",
		},
		{
			name: "rate limit and breaker",
			yaml: "routes:\n  - {type: a, handler: ignore, rate: 50/s}\n  - {type: b, handler: ignore, rate: 90/m, burst: 3, breaker: {failures: 5, cool_down: 30s}}\n  - {type: c, handler: ignore, rate: 0.5/s}\n",
			wantRoutes: []handlers.RouteConfig{
				{Type: "a", Handler: "ignore", Rate: 50},
				{Type: "b", Handler: "ignore", Rate: 1.5, Burst: 3, Breaker: handlers.Breaker{Failures: 5, CoolDown: 30 * time.Second}},
				{Type: "c", Handler: "ignore", Rate: 0.5},
			},
			wantDefault: "dead",
		},
		{
			name: "batch",
			yaml: "routes:\n  - {type: a, handler: http, url: 'https://h/x', batch: {max_rows: 100, max_bytes: 1048576, max_wait: 50ms}}\n  - {type: b, handler: river, kind: b_job, batch: {max_rows: 500}}\n",
			wantRoutes: []handlers.RouteConfig{
				{Type: "a", Handler: "http", URL: "https://h/x", Timeout: handlers.DefaultHTTPTimeout,
					Batch: handlers.Batch{MaxRows: 100, MaxBytes: 1 << 20, MaxWait: 50 * time.Millisecond}},
				{Type: "b", Handler: "river", Kind: "b_job", Batch: handlers.Batch{MaxRows: 500}},
			},
			wantDefault: "dead",
		},
		{
			name:        "alias value",
			yaml:        "routes:\n  - type: a\n    handler: http\n    url: &u http://h/hook\n  - type: b\n    handler: http\n    url: *u\n",
			wantRoutes:  []handlers.RouteConfig{{Type: "a", Handler: "http", URL: "http://h/hook", Timeout: handlers.DefaultHTTPTimeout}, {Type: "b", Handler: "http", URL: "http://h/hook", Timeout: handlers.DefaultHTTPTimeout}},
			wantDefault: "dead",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := routesfile.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(r.Routes, tt.wantRoutes) {
				t.Errorf("Routes = %+v\nwant     %+v", r.Routes, tt.wantRoutes)
			}
			if r.Default != tt.wantDefault {
				t.Errorf("Default = %q, want %q", r.Default, tt.wantDefault)
			}
		})
	}
}

// badRoutes lists every testdata/*.bad.yml file with the lines of its
// error, in order; each line must contain its entry.
var badRoutes = []struct {
	file string
	want []string
}{
	{"missing_type.bad.yml", []string{"route 2: type: required"}},
	{"empty_type.bad.yml", []string{"route 1: type: required"}},
	{"duplicate_type.bad.yml", []string{`route 2 (type "order.created"): type: duplicate of route 1`}},
	{"missing_handler.bad.yml", []string{`route 1 (type "order.created"): handler: required (http, ignore, dead or river)`}},
	{"unknown_handler.bad.yml", []string{`route 1 (type "order.created"): handler: unknown handler "grpc" (want http, ignore, dead or river)`}},
	{"http_without_url.bad.yml", []string{`route 1 (type "order.created"): url: required for handler http`}},
	{"bad_url.bad.yml", []string{`route 2 (type "order.paid"): url: must be an absolute http or https URL`}},
	{"bad_url_scheme.bad.yml", []string{`route 1 (type "order.created"): url: must be an absolute http or https URL`}},
	{"url_on_ignore.bad.yml", []string{`route 1 (type "order.audited"): url: not allowed for handler ignore`}},
	{"on_dead_unordered.bad.yml", []string{`route 1 (type "order.created"): on_dead: only for ordered routes (ordered: true)`}},
	{"bad_concurrency.bad.yml", []string{`route 1 (type "order.created"): concurrency: must be at least 1, got 0`}},
	{"river_without_kind.bad.yml", []string{`route 1 (type "payment.captured"): kind: required for handler river`}},
	{"kind_on_http.bad.yml", []string{`route 1 (type "order.created"): kind: not allowed for handler http`}},
	{"bad_ordered.bad.yml", []string{`route 1 (type "order.created"): ordered: must be true or false, not "yes please"`}},
	{"bad_backoff.bad.yml", []string{`route 1 (type "order.created"): backoff_max: must be at least backoff_base`}},
	{"bad_idempotency_key.bad.yml", []string{`route 1 (type "order.created"): idempotency_key: must be source_event_id or event_id, not "uuid"`}},
	{"idempotency_key_on_ignore.bad.yml", []string{`route 1 (type "order.audited"): idempotency_key: not allowed for handler ignore`}},
	{"bad_timeout.bad.yml", []string{`route 1 (type "order.created"): timeout: "10" is not a Go duration such as 10s or 1m30s`}},
	{"zero_timeout.bad.yml", []string{`route 1 (type "order.created"): timeout: must be greater than 0`}},
	{"long_timeout.bad.yml", []string{`route 1 (type "order.created"): timeout: must be at most 10m0s`}},
	{"unknown_field.bad.yml", []string{
		`route 1 (type "order.created"): unknown field "urll" (want type, handler, url, timeout, idempotency_key, concurrency, max_attempts, backoff_base, backoff_max, ordered, on_dead, kind, queue, priority, rate, burst, breaker, batch)`,
		`route 1 (type "order.created"): url: required for handler http`,
	}},
	{"bad_rate.bad.yml", []string{
		`route 1 (type "a"): rate: "50" is not a rate such as 50/s or 3000/m`,
		`route 2 (type "b"): rate: must be greater than 0, got "0/s"`,
		`route 3 (type "c"): rate: "5/h" is not a rate such as 50/s or 3000/m`,
		`route 4 (type "d"): rate: must be at most 1000000/s, got "2000000/s"`,
	}},
	{"burst_without_rate.bad.yml", []string{
		`route 1 (type "a"): burst: only with a rate`,
		`route 2 (type "b"): burst: must be at least 1, got 0`,
	}},
	{"bad_batch.bad.yml", []string{
		`route 1 (type "a"): batch: max_rows: required`,
		`route 2 (type "b"): batch: max_rows: must be between 1 and 10000, got 0`,
		`route 3 (type "c"): batch: unknown field "maxrows" (want max_rows, max_bytes, max_wait)`,
		`route 4 (type "d"): batch: must be a mapping with max_rows, max_bytes and max_wait`,
		`route 5 (type "e"): batch: max_wait: "10" is not a Go duration such as 50ms`,
		`route 6 (type "f"): batch: only for batch handlers`,
	}},
	{"bad_breaker.bad.yml", []string{
		`route 1 (type "a"): breaker: cool_down: required`,
		`route 2 (type "b"): breaker: failures: must be between 1 and 1000000, got 0`,
		`route 3 (type "c"): breaker: unknown field "cooldown" (want failures, cool_down)`,
		`route 3 (type "c"): breaker: cool_down: required`,
		`route 4 (type "d"): breaker: must be a mapping with failures and cool_down`,
		`route 5 (type "e"): breaker: cool_down: "30" is not a Go duration such as 30s or 1m`,
	}},
	{"unknown_top_field.bad.yml", []string{`line 2: unknown field "defaults" (want routes, default)`}},
	{"duplicate_top_key.bad.yml", []string{
		`line 4: unknown field "x\ny" (want routes, default)`,
		`line 5: routes: given twice`,
		`line 6: "x\ny": given twice`,
	}},
	{"bad_default.bad.yml", []string{`default: must be dead or ignore, not "http"`}},
	{"empty.bad.yml", []string{"file is empty"}},
	{"routes_not_list.bad.yml", []string{"line 2: routes: must be a list"}},
	{"route_not_mapping.bad.yml", []string{"route 1: must be a mapping with type, handler, url, timeout, idempotency_key"}},
	{"type_not_string.bad.yml", []string{"route 1: type: must be a string"}},
	{"top_not_mapping.bad.yml", []string{"line 1: want a mapping with routes and default"}},
	{"two_documents.bad.yml", []string{"line 2: more than one YAML document"}},
	{"syntax.bad.yml", []string{"syntax.bad.yml: line 1: did not find expected"}},
	{"multiple.bad.yml", []string{
		`route 1 (type "order.created"): url: must be an absolute http or https URL`,
		`route 1 (type "order.created"): timeout: "forever" is not a Go duration`,
		`route 2 (type "order.created"): type: duplicate of route 1`,
		`route 3: type: required`,
		`route 3: handler: unknown handler "carrier-pigeon"`,
		`default: must be dead or ignore, not "maybe"`,
	}},
}

func TestLoadBad(t *testing.T) {
	t.Parallel()
	for _, tt := range badRoutes {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", tt.file)
			r, err := routesfile.Load(path)
			if err == nil {
				t.Fatalf("Load(%s) = %+v, want an error", path, r)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("error has %d lines, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for i, line := range lines {
				if !strings.HasPrefix(line, path+": ") {
					t.Errorf("line %d %q does not start with the file name", i+1, line)
				}
				if !strings.Contains(line, tt.want[i]) {
					t.Errorf("line %d %q does not contain %q", i+1, line, tt.want[i])
				}
			}
		})
	}
}

// TestLoadBadFilesCovered keeps badRoutes in step with testdata:
// every *.bad.yml file must be listed there.
func TestLoadBadFilesCovered(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.bad.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("glob: %v, %d files", err, len(files))
	}
	listed := make(map[string]bool)
	for _, tt := range badRoutes {
		listed[tt.file] = true
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s is not listed in badRoutes", f)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := routesfile.Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("Load: %v, want a not-exist error naming the file", err)
	}
}

func TestParseNamesNoFile(t *testing.T) {
	t.Parallel()
	_, err := routesfile.Parse([]byte("default: nope\n"))
	if err == nil || err.Error() != `routes file: default: must be dead or ignore, not "nope"` {
		t.Fatalf("Parse: %v", err)
	}
}

// Reproduction from the reliability report: a 50 MB routes file sent on
// SIGHUP took the daemon from 32 MB to 2.7 GB and wrote a 207 MB log line.
// The file is refused by its size before it is read (here a sparse 64 MiB
// file: no error but the size), a file at the limit still loads, and one
// byte more is refused.
func TestRoutesFileIsBoundedInSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 64<<20); err != nil {
		t.Fatal(err)
	}
	_, err := routesfile.Load(huge)
	want := fmt.Sprintf("%s: file of %d bytes is larger than the limit of %d bytes", huge, 64<<20, routesfile.MaxBytes)
	if err == nil || err.Error() != want {
		t.Fatalf("Load of a 64 MiB file: %v\nwant: %s", err, want)
	}

	valid := "routes:\n  - type: a\n    handler: ignore\ndefault: dead\n"
	padded := valid + strings.Repeat("#", routesfile.MaxBytes-len(valid)-1) + "\n"
	atLimit := filepath.Join(dir, "at-limit.yaml")
	if err := os.WriteFile(atLimit, []byte(padded), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := routesfile.Load(atLimit); err != nil || len(r.Routes) != 1 {
		t.Fatalf("Load of a file of exactly %d bytes: %v", routesfile.MaxBytes, err)
	}
	over := filepath.Join(dir, "over.yaml")
	if err := os.WriteFile(over, []byte(padded+"#"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := routesfile.Load(over); err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Fatalf("Load of a file one byte over the limit: %v, want it refused", err)
	}
	if _, err := routesfile.Parse([]byte(padded + "#")); err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Fatalf("Parse of content one byte over the limit: %v, want it refused", err)
	}
}
