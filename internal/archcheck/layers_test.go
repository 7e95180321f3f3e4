package archcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// layer is one row of the map of docs/development.md#layout: packages, by
// their directory (a directory stands for itself and every package below
// it, unless a longer entry claims one), that may import one another
// freely, and import only from the layers below.
type layer struct {
	name string
	dirs []string
}

// layers is the stated direction of the imports, top to bottom: a
// package's non-test code imports only packages of its own layer or of
// layers below it. docs/development.md#layout draws the same table
// (TestLayoutDocMatchesLayers holds them together).
var layers = []layer{
	{"programs", []string{"cmd"}},
	{"test kits and checks", []string{"handlers/handlertest", "internal/ingestcore/ingesttest", "internal/outbox/publishers/pubtest",
		"internal/testkit", "internal/testkit/natstest", "internal/pgtest",
		"internal/console/browsertest", "internal/startstop/startstoptest", "internal/netfault",
		"internal/syncbuf", "internal/yardstick", "internal/archcheck", "internal/doccheck", "internal/model"}},
	{"the daemon's parts", []string{"config", "internal/vardocs", "internal/console", "internal/ops", "internal/otelenv",
		"internal/opfiles/routesfile", "internal/opfiles/webhookfile"}},
	{"the embedding API", []string{"."}},
	{"the sources", []string{"ingest", "internal/ingestcore"}},
	{"the worker pool", []string{"internal/engine"}},
	{"maintenance", []string{"internal/maintenance"}},
	{"the outbox", []string{"internal/outbox"}},
	{"the engine's settings", []string{"worker"}},
	{"the handler API", []string{"handlers"}},
	{"the statements", []string{"internal/driver", "internal/handoff", "internal/partitions"}},
	{"building blocks", []string{"internal/brokers", "internal/opfiles", "internal/backoff", "internal/clock",
		"internal/lease", "internal/startstop", "internal/httpserve", "internal/natsurl", "internal/sensitive",
		"internal/stdwebhooks", "migrations"}},
}

// undocumented are entries of layers for work under way in other
// branches, whose packages the layout does not name yet: their owners add
// the line when they land (the test reports, without failing, one that
// holds a package).
var undocumented = map[string]string{}

// allowedUp lists the imports against the direction that are known, with
// the work that removes them. An entry no longer seen is reported (remove
// it); any other import up the table fails.
var allowedUp = map[string]string{
	// None: the last, internal/outbox -> ingest (the outbox borrowed the
	// sources' broker connections), went with internal/brokers (issue 26
	// item 2).
}

// layerOf is the index in layers of the package in dir, by the longest
// entry that holds it; -1 when none does.
func layerOf(dir string) int {
	best, at := -1, -1
	for i, l := range layers {
		for _, d := range l.dirs {
			if (d == "." && dir == ".") || (d != "." && (dir == d || strings.HasPrefix(dir, d+"/"))) {
				if len(d) > best {
					best, at = len(d), i
				}
			}
		}
	}
	return at
}

// upImports are the imports of imps that run up the table, as "from ->
// to", and the packages no layer holds.
func upImports(imps []Import) (up []string, unplaced []string) {
	seen := map[string]bool{}
	for _, imp := range imps {
		for _, dir := range []string{imp.From, imp.To} {
			if layerOf(dir) < 0 && !seen[dir] {
				seen[dir] = true
				unplaced = append(unplaced, dir)
			}
		}
		from, to := layerOf(imp.From), layerOf(imp.To)
		if from >= 0 && to >= 0 && to < from {
			up = append(up, fmt.Sprintf("%s -> %s", imp.From, imp.To))
		}
	}
	sort.Strings(up)
	sort.Strings(unplaced)
	return up, unplaced
}

// TestImportsFollowTheLayers fails when a package's non-test code imports
// a package of a layer above its own (the map of docs/development.md
// says which way dependencies point), or a package has no layer. With -v
// it prints the count of imports that run up.
func TestImportsFollowTheLayers(t *testing.T) {
	t.Parallel()
	dir, own := root(t)
	imps, err := Imports(dir, "github.com/inboxd/inboxd")
	if err != nil {
		t.Fatal(err)
	}
	if len(imps) == 0 {
		t.Fatal("no import found: the check no longer sees the packages")
	}
	up, unplaced := upImports(imps)
	report := t.Errorf
	if !own {
		report = t.Logf // another tree's figures
	}
	for _, dir := range unplaced {
		report("%s: in no layer of the table: add it to layers (internal/archcheck/layers_test.go) and docs/development.md#layout", dir)
	}
	used := map[string]bool{}
	for _, u := range up {
		if why, ok := allowedUp[u]; ok {
			used[u] = true
			t.Logf("%s: up the table, allowed until %s", u, why)
			continue
		}
		report("%s: imports a package of a layer above its own", u)
	}
	for u := range allowedUp {
		if own && !used[u] {
			t.Logf("%s: allowed but no longer imported: remove it from allowedUp", u)
		}
	}
	t.Logf("%d imports between the module's packages, %d up the table", len(imps), len(up))
}

// The check sees an import up the table, and a package no layer holds.
func TestUpImportsCatches(t *testing.T) {
	t.Parallel()
	up, unplaced := upImports([]Import{
		{From: "handlers", To: "worker"},                   // up: the handler API is below the settings
		{From: "worker", To: "handlers"},                   // down
		{From: "internal/engine", To: "internal/engine/x"}, // within a layer
		{From: "cmd/inboxd", To: "."},                      // down
		{From: "newpkg", To: "handlers"},
	})
	if len(up) != 1 || up[0] != "handlers -> worker" {
		t.Errorf("up = %v, want [handlers -> worker]", up)
	}
	if len(unplaced) != 1 || unplaced[0] != "newpkg" {
		t.Errorf("unplaced = %v, want [newpkg]", unplaced)
	}
	if got := layerOf("internal/opfiles/routesfile"); layers[got].name != "the daemon's parts" {
		t.Errorf("routesfile is in %q: the longest entry must win", layers[got].name)
	}
}

// TestLayoutDocMatchesLayers holds docs/development.md#layout to the
// layers table: every layer's name, in order, and under it every entry of
// the table that holds a package, in the layout's code block.
func TestLayoutDocMatchesLayers(t *testing.T) {
	t.Parallel()
	dir, own := root(t)
	if !own {
		t.Skip("another tree: its docs are its own")
	}
	doc, err := os.ReadFile(filepath.Join(dir, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Layout\n")
	if !ok {
		t.Fatal("docs/development.md has no Layout section")
	}
	_, block, _ := strings.Cut(section, "```\n")
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatal("the Layout section has no code block")
	}
	imps, err := Imports(dir, "github.com/inboxd/inboxd")
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{} // table entries that hold a package
	for _, imp := range imps {
		for _, d := range []string{imp.From, imp.To} {
			if i := layerOf(d); i >= 0 {
				for _, e := range layers[i].dirs {
					if (e == "." && d == ".") || d == e || strings.HasPrefix(d, e+"/") {
						held[e] = true
					}
				}
			}
		}
	}
	lines := strings.Split(block, "\n")
	at := 0 // the line of the current layer's name
	for _, l := range layers {
		next := -1
		for i := at; i < len(lines); i++ {
			if lines[i] == l.name {
				next = i
				break
			}
		}
		if next < 0 {
			t.Errorf("layer %q: not a line of the layout's block, after the layers before it", l.name)
			continue
		}
		end := len(lines)
		for i := next + 1; i < len(lines); i++ {
			if lines[i] != "" && lines[i][0] != ' ' {
				end = i
				break
			}
		}
		under := strings.Join(lines[next+1:end], "\n") + " "
		for _, e := range l.dirs {
			name := e + "/"
			if e == "." {
				name = "inboxd (module root)"
			}
			switch why, pending := undocumented[e]; {
			case !held[e] || strings.Contains(under, " "+name):
			case pending:
				t.Logf("layer %q: %s (%s) holds a package now: name it in the layout and remove it from undocumented", l.name, name, why)
			default:
				t.Errorf("layer %q: %s is not under it in the layout", l.name, name)
			}
		}
		at = next + 1
	}
}

// TestOnlyTheDaemonReadsTheEnvironment fails when a package of the
// embedding API's layer or below reads the process environment
// (os.Getenv, LookupEnv, Environ, ExpandEnv): an embedder gives those
// packages every setting as a Go value.
func TestOnlyTheDaemonReadsTheEnvironment(t *testing.T) {
	t.Parallel()
	dir, own := root(t)
	api := -1
	for i, l := range layers {
		if l.name == "the embedding API" {
			api = i
		}
	}
	reads, err := EnvReads(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(reads) == 0 {
		t.Fatal("no environment read found at all: the check no longer sees them (the programs read it)")
	}
	for _, r := range reads {
		pkg, _, _ := strings.Cut(r, ":")
		pkg = filepath.ToSlash(filepath.Dir(pkg))
		if i := layerOf(pkg); i >= api && own {
			t.Errorf("%s: reads the environment in layer %q", r, layers[i].name)
		}
	}
}
