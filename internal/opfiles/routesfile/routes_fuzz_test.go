package routesfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/opfiles/routesfile"
)

// FuzzParse checks that Parse never panics and either returns an
// error every line of which names the file, or routes that each have a type,
// a known handler and the fields that handler allows, and that register on a
// fresh Registry without error.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yml")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"routes: []\n",
		"default: ignore\n",
		"routes:\n  - {type: a, handler: http, url: 'https://h/x', timeout: 1ms}\n",
		"routes:\n  - type: a\n    handler: http\n    url: &u http://h/hook\n  - type: b\n    handler: http\n    url: *u\n",
		"routes:\n  - &r {type: a, handler: ignore}\n  - *r\n",
		"a: &a [*a]\n",
		"\"x\\ny\": 1\n\"x\\ny\": 2\n",
		"routes:\n  - {type: \"a\\nb\", handler: \"h\\nx\", url: \"u\\nv\", timeout: \"1\\n\"}\n",
		"routes:\n  - {? [a]: b}\n",
		"? [a]\n: b\n",
		"routes: !!binary aGVsbG8=\n",
		"routes:\n  - {type: a, handler: http, url: 'http://[::1]:8080/x'}\n",
		"routes:\n  - {type: a, handler: http, url: 'http://h/x', timeout: 10m0.000000001s}\n",
		"--- \n...\n",
		"%YAML 1.2\n---\nroutes: []\n",
		"routes:\n  - {type: a, handler: ignore, rate: 50/s, burst: 5, breaker: {failures: 3, cool_down: 1s}}\n",
		"routes:\n  - {type: a, handler: ignore, rate: 1e3/s, burst: -1, breaker: {failures: 3, failures: 4}}\n",
		"routes:\n  - {type: a, handler: ignore, rate: .5/m, breaker: {? [x]: 1}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := routesfile.Parse(data)
		if err != nil {
			if r != nil {
				t.Fatalf("Parse returned routes and an error: %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "routes file: ") {
					t.Fatalf("error line %q does not name the file; whole error:\n%v", line, err)
				}
			}
			return
		}
		if r.Default != handlers.HandlerDead && r.Default != handlers.HandlerIgnore {
			t.Fatalf("default %q", r.Default)
		}
		for i, rc := range r.Routes {
			if rc.Type == "" {
				t.Fatalf("route %d has no type: %+v", i+1, rc)
			}
			switch rc.Handler {
			case handlers.HandlerHTTP:
				if rc.URL == "" || rc.Timeout <= 0 || rc.Timeout > handlers.MaxHTTPTimeout {
					t.Fatalf("http route %d: %+v", i+1, rc)
				}
			case handlers.HandlerIgnore, handlers.HandlerDead:
				if rc.URL != "" || rc.Timeout != 0 {
					t.Fatalf("%s route %d with url or timeout: %+v", rc.Handler, i+1, rc)
				}
			default:
				t.Fatalf("route %d: unknown handler %q", i+1, rc.Handler)
			}
		}
		reg := handlers.NewRegistry()
		if err := r.Register(reg, handlers.RegisterOptions{}); err != nil {
			t.Fatalf("parsed routes do not register: %v\nroutes: %+v", err, r.Routes)
		}
		if reg.Types() != len(r.Routes) {
			t.Fatalf("registered %d types for %d routes", reg.Types(), len(r.Routes))
		}
	})
}
