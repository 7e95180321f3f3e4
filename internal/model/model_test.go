package model

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite the model tables of docs/guarantees.md from what SPIN explored")

// guaranteesPage is the page whose section Model-checked protocols shows
// what the models cover and what SPIN explored.
const guaranteesPage = "../../docs/guarantees.md"

// The generated part of guaranteesPage's section.
const (
	tableBegin = "<!-- BEGIN MODELS: written by `make docs` from internal/model (the models, their properties and mutations, what SPIN explored); do not edit by hand -->"
	tableEnd   = "<!-- END MODELS -->"
)

// mutationEnv names the variable that turns one of a model's mutations on
// (its number; 0 or unset: none).
const mutationEnv = "INBOXD_MODEL_MUTATION"

// The checker's settings: exhaustive (no bitstate hashing), assertions and
// invalid end states only (SAFETY: every property is an assertion),
// compressed states, a bound on memory that makes a search too big fail
// instead of swapping, and room enough in the search's depth.
var (
	ccFlags  = []string{"-O2", "-DSAFETY", "-DCOLLAPSE", "-DMEMLIM=512", "-w", "-o", "pan", "pan.c"}
	panFlags = []string{"-m200000", "-w20"}
)

// model is a .pml file of this directory, with what its comments declare.
type model struct {
	name     string // the file's name, e.g. lease.pml
	src      string
	protocol string     // @protocol: what it models
	props    []property // @property
	muts     []mutation // @mutation and @safe
	sqls     []string   // @sql: statement files of internal/driver/sql
	gos      []string   // @go: Go functions, (*T).m or T.m
}

// property is a named assertion of a model.
type property struct {
	name, text string
}

// mutation is a change to a model, turned on by its number: it must break
// prop, or, when safe, change nothing SPIN can tell.
type mutation struct {
	n          int
	name, prop string
	text       string
	safe       bool
}

var (
	protocolLine = regexp.MustCompile(`(?m)^ \* @protocol (.+)$`)
	propertyLine = regexp.MustCompile(`(?m)^ \* @property (P_\w+): (.+)$`)
	mutationLine = regexp.MustCompile(`(?m)^ \* @mutation (\d+) (\w+) (P_\w+): (.+)$`)
	safeLine     = regexp.MustCompile(`(?m)^ \* @safe (\d+) (\w+): (.+)$`)
	sqlTag       = regexp.MustCompile(`@sql (\w+\.sql)`)
	goTag        = regexp.MustCompile(`@go (\(\*\w+\)\.\w+|\w+\.\w+)`)
	hiddenProps  = regexp.MustCompile(`(?m)^hidden byte (P_\w+(?:, P_\w+)*);`)
	stepLine     = regexp.MustCompile(`\b(d_step|atomic|c_code) \{`)
)

// loadModels reads and checks the declarations of every model of this
// directory.
func loadModels(t *testing.T) []*model {
	t.Helper()
	paths, err := filepath.Glob("*.pml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no models (*.pml) in internal/model: %v", err)
	}
	sort.Strings(paths)
	var out []*model
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m, err := parseModel(p, string(data))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		out = append(out, m)
	}
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// parseModel reads a model's declarations and checks them against its
// text: every property declared, asserted and broken by a mutation; every
// mutation used; every step named.
func parseModel(name, src string) (*model, error) {
	m := &model{name: name, src: src}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if pm := protocolLine.FindStringSubmatch(src); pm != nil {
		m.protocol = pm[1]
	} else {
		bad("no @protocol line")
	}
	declared := map[string]bool{}
	if h := hiddenProps.FindStringSubmatch(src); h != nil {
		for _, p := range strings.Split(h[1], ", ") {
			declared[p] = true
		}
	} else {
		bad("no `hidden byte P_…;` line naming the properties")
	}
	for _, pm := range propertyLine.FindAllStringSubmatch(src, -1) {
		m.props = append(m.props, property{name: pm[1], text: pm[2]})
		if !declared[pm[1]] {
			bad("@property %s is not among the hidden bytes that name the assertions", pm[1])
		}
		if !strings.Contains(src, "PROP("+pm[1]+",") {
			bad("@property %s is asserted nowhere (PROP(%s, …))", pm[1], pm[1])
		}
		delete(declared, pm[1])
	}
	for p := range declared {
		bad("%s is declared but has no @property line", p)
	}
	seen := map[int]bool{}
	addMut := func(mu mutation) {
		if seen[mu.n] || mu.n == 0 {
			bad("mutation number %d used twice (or 0)", mu.n)
		}
		seen[mu.n] = true
		if !strings.Contains(src, fmt.Sprintf("MUT(%d)", mu.n)) {
			bad("mutation %d (%s) is declared but MUT(%d) appears nowhere", mu.n, mu.name, mu.n)
		}
		m.muts = append(m.muts, mu)
	}
	for _, mm := range mutationLine.FindAllStringSubmatch(src, -1) {
		n, _ := strconv.Atoi(mm[1])
		addMut(mutation{n: n, name: mm[2], prop: mm[3], text: mm[4]})
	}
	for _, mm := range safeLine.FindAllStringSubmatch(src, -1) {
		n, _ := strconv.Atoi(mm[1])
		addMut(mutation{n: n, name: mm[2], text: mm[3], safe: true})
	}
	sort.Slice(m.muts, func(i, j int) bool { return m.muts[i].n < m.muts[j].n })
	for _, p := range m.props {
		broken := false
		for _, mu := range m.muts {
			broken = broken || mu.prop == p.name
		}
		if !broken {
			bad("no mutation breaks %s: nothing shows the model catches what it guards", p.name)
		}
	}
	for _, mu := range m.muts {
		if !mu.safe && !m.hasProperty(mu.prop) {
			bad("mutation %s names %s, which is no @property", mu.name, mu.prop)
		}
	}
	for _, n := range regexp.MustCompile(`MUT\((\d+)\)`).FindAllStringSubmatch(src, -1) {
		k, _ := strconv.Atoi(n[1])
		if !seen[k] {
			bad("MUT(%d) is used but no @mutation or @safe line declares it", k)
		}
	}
	// Every step names what it stands for, on its opening line or the next.
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		if !stepLine.MatchString(l) || strings.HasPrefix(strings.TrimSpace(l), "*") {
			continue
		}
		text := l
		if i+1 < len(lines) {
			text += lines[i+1]
		}
		if !strings.Contains(text, "@sql ") && !strings.Contains(text, "@go ") && !strings.Contains(text, "@model") {
			bad("line %d: a step that names no statement (@sql), Go function (@go) or model step (@model): %s", i+1, strings.TrimSpace(l))
		}
	}
	for _, s := range sqlTag.FindAllStringSubmatch(src, -1) {
		m.sqls = appendNew(m.sqls, s[1])
	}
	for _, g := range goTag.FindAllStringSubmatch(src, -1) {
		m.gos = appendNew(m.gos, g[1])
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return m, nil
}

func (m *model) hasProperty(name string) bool {
	for _, p := range m.props {
		if p.name == name {
			return true
		}
	}
	return false
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// checker is a model compiled by SPIN into its verifier (pan).
type checker struct {
	m   *model
	dir string
}

// result is what one run of a verifier found.
type result struct {
	errors      int
	violated    string // the property of the first assertion violated
	states      int64  // states stored
	transitions int64
	depth       int             // the deepest the search went
	errorDepth  int             // the counterexample's length (steps)
	incomplete  string          // why the search is not exhaustive ("": it is)
	unreached   map[string]bool // the model's statements the search never executed
	took        time.Duration
	out         string
}

var (
	errorsRe      = regexp.MustCompile(`errors: (\d+)`)
	statesRe      = regexp.MustCompile(`(\d+) states, stored`)
	transitionsRe = regexp.MustCompile(`(\d+) transitions \(`)
	depthRe       = regexp.MustCompile(`depth reached (\d+)`)
	violatedRe    = regexp.MustCompile(`assertion violated \((P_\w+)\|\|`)
	errorDepthRe  = regexp.MustCompile(`pan:1: .* \(at depth (\d+)\)`)
	otherErrorRe  = regexp.MustCompile(`pan:\d+: (.+) \(at depth \d+\)`)
	unreachedRe   = regexp.MustCompile(`(?m)^\t(\w+\.pml:\d+, state \d+, .*)$`)
)

// compile runs spin and the C compiler on m in a directory of its own.
func compile(t *testing.T, spin, cc string, m *model) *checker {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, m.name), []byte(m.src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, step := range [][]string{{spin, "-a", m.name}, append([]string{cc}, ccFlags...)} {
		cmd := exec.CommandContext(ctx, step[0], step[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %s: %v\n%s", m.name, strings.Join(step, " "), err, out)
		}
	}
	return &checker{m: m, dir: dir}
}

// run runs the verifier with mutation n turned on (0: none).
func (c *checker) run(t *testing.T, n int) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./pan", panFlags...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", mutationEnv, n))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r := result{took: time.Since(start), out: string(out)}
	if err != nil {
		t.Fatalf("%s: pan (mutation %d): %v\n%s", c.m.name, n, err, out)
	}
	if g := errorsRe.FindStringSubmatch(r.out); g != nil {
		r.errors, _ = strconv.Atoi(g[1])
	} else {
		t.Fatalf("%s: pan (mutation %d) reported no error count:\n%s", c.m.name, n, out)
	}
	if g := statesRe.FindStringSubmatch(r.out); g != nil {
		r.states, _ = strconv.ParseInt(g[1], 10, 64)
	}
	if g := transitionsRe.FindStringSubmatch(r.out); g != nil {
		r.transitions, _ = strconv.ParseInt(g[1], 10, 64)
	}
	if g := depthRe.FindStringSubmatch(r.out); g != nil {
		r.depth, _ = strconv.Atoi(g[1])
	}
	if g := errorDepthRe.FindStringSubmatch(r.out); g != nil {
		r.errorDepth, _ = strconv.Atoi(g[1])
	}
	if g := violatedRe.FindStringSubmatch(r.out); g != nil {
		r.violated = g[1]
	} else if g := otherErrorRe.FindStringSubmatch(r.out); g != nil {
		r.violated = g[1]
	}
	r.unreached = map[string]bool{}
	for _, g := range unreachedRe.FindAllStringSubmatch(r.out, -1) {
		r.unreached[g[1]] = true
	}
	for _, why := range []string{"reached -DMEMLIM bound", "max search depth too small", "Search not completed"} {
		if strings.Contains(r.out, why) && (r.errors == 0 || why != "Search not completed") {
			r.incomplete = why
		}
	}
	return r
}

// trail replays the counterexample of the last run that found one.
func (c *checker) trail(n int) string {
	cmd := exec.Command("./pan", "-r", "-g")
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", mutationEnv, n))
	out, _ := cmd.CombinedOutput()
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "proc ") && (strings.Contains(l, "D_STEP") || strings.Contains(l, "[")) {
			keep = append(keep, l)
		}
	}
	if len(keep) > 120 {
		keep = keep[len(keep)-120:]
	}
	return strings.Join(keep, "\n")
}

// outcome is what TestModels found for one model.
type outcome struct {
	base   result
	caught map[int]result // by mutation
}

// TestModels checks every model exhaustively: it must hold, each of its
// mutations must make SPIN find a counterexample of the property the
// mutation names (each safe one must hold too), and the search must be
// complete. Then docs/guarantees.md must show what was explored (with
// -update, as `make docs` runs it, the test writes it there).
func TestModels(t *testing.T) {
	models := loadModels(t)
	spin, err := exec.LookPath("spin")
	if err != nil {
		testkit.Unavailable(t, "spin is not on PATH: install Debian's spin package (SPIN, the model checker) to check internal/model")
		return
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			testkit.Unavailable(t, "no C compiler (gcc, cc) on PATH: SPIN's verifiers are C programs")
			return
		}
	}
	version := spinVersion(t, spin)
	var mu sync.Mutex
	found := map[string]*outcome{}
	t.Run("check", func(t *testing.T) {
		for _, m := range models {
			t.Run(strings.TrimSuffix(m.name, ".pml"), func(t *testing.T) {
				t.Parallel()
				c := compile(t, spin, cc, m)
				o := &outcome{caught: map[int]result{}}
				ok := t.Run("holds", func(t *testing.T) {
					r := c.run(t, 0)
					o.base = r
					t.Logf("%s: %d states, %d transitions, depth %d, %.2fs", m.name, r.states, r.transitions, r.depth, r.took.Seconds())
					if r.errors != 0 {
						t.Fatalf("%s does not hold: %s\n%s\ncounterexample:\n%s", m.name, r.violated, r.out, c.trail(0))
					}
					if r.incomplete != "" {
						t.Fatalf("%s: the search is not exhaustive (%s): make the model smaller\n%s", m.name, r.incomplete, r.out)
					}
				})
				if !ok {
					return
				}
				for _, mu := range m.muts {
					t.Run(mu.name, func(t *testing.T) {
						r := c.run(t, mu.n)
						o.caught[mu.n] = r
						if mu.safe {
							if r.errors != 0 {
								t.Fatalf("%s: %s was expected to change nothing, but breaks %s\ncounterexample:\n%s", m.name, mu.name, r.violated, c.trail(mu.n))
							}
							if r.incomplete != "" {
								t.Fatalf("%s: %s: the search is not exhaustive (%s)", m.name, mu.name, r.incomplete)
							}
							t.Logf("%s holds with %s: %d states", m.name, mu.name, r.states)
							return
						}
						if r.errors == 0 {
							t.Fatalf("%s: SPIN finds no counterexample with %s (%s): the model does not catch what %s guards (%d states)",
								m.name, mu.name, mu.text, mu.prop, r.states)
						}
						if r.violated != mu.prop {
							t.Fatalf("%s: %s breaks %q, not %s\ncounterexample:\n%s", m.name, mu.name, r.violated, mu.prop, c.trail(mu.n))
						}
						t.Logf("%s: %s breaks %s (a counterexample of %d steps, %d states)", m.name, mu.name, mu.prop, r.errorDepth, r.states)
					})
				}
				// A step no run executes is a model that does not say what
				// it seems to: a guard that can never hold, a branch that
				// shadows another.
				var dead []string
				for st := range o.base.unreached {
					reached := false
					for _, r := range o.caught {
						reached = reached || !r.unreached[st]
					}
					if !reached {
						dead = append(dead, st)
					}
				}
				if len(dead) > 0 && !t.Failed() {
					sort.Strings(dead)
					t.Errorf("%s: steps no run reaches (with or without a mutation):\n\t%s", m.name, strings.Join(dead, "\n\t"))
				}
				mu.Lock()
				found[m.name] = o
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	for _, m := range models {
		if found[m.name] == nil {
			t.Logf("%s was not run (-run): docs/guarantees.md is not compared", m.name)
			return
		}
	}
	checkGuaranteesPage(t, models, found, version)
}

// spinVersion is SPIN's version, as the page records it.
func spinVersion(t *testing.T, spin string) string {
	t.Helper()
	out, err := exec.Command(spin, "-V").CombinedOutput()
	if err != nil {
		t.Fatalf("spin -V: %v\n%s", err, out)
	}
	if v := regexp.MustCompile(`Spin Version (\S+)`).FindSubmatch(out); v != nil {
		return string(v[1])
	}
	return strings.TrimSpace(string(out))
}

// modelsTable is the generated part of the page's section: the models and
// what SPIN explored, then each property with the mutations that break it.
func modelsTable(models []*model, found map[string]*outcome, version string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Explored by SPIN %s, exhaustively (`-DSAFETY`: every property is an assertion; no bitstate hashing):\n\n", version)
	b.WriteString("| model | protocol | states | transitions | depth |\n| --- | --- | --- | --- | --- |\n")
	for _, m := range models {
		r := found[m.name].base
		fmt.Fprintf(&b, "| [`%s`](../internal/model/%s) | %s | %d | %d | %d |\n", m.name, m.name, m.protocol, r.states, r.transitions, r.depth)
	}
	b.WriteString("\n| property | model | asserts | broken by (SPIN finds a counterexample) |\n| --- | --- | --- | --- |\n")
	for _, m := range models {
		for _, p := range m.props {
			var muts []string
			for _, mu := range m.muts {
				if mu.prop == p.name {
					muts = append(muts, fmt.Sprintf("`%s`: %s", mu.name, mu.text))
				}
			}
			fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", p.name, m.name, p.text, strings.Join(muts, "; "))
		}
	}
	var safe []string
	for _, m := range models {
		for _, mu := range m.muts {
			if mu.safe {
				safe = append(safe, fmt.Sprintf("`%s` (`%s`): %s", mu.name, m.name, mu.text))
			}
		}
	}
	if len(safe) > 0 {
		b.WriteString("\nChanges SPIN shows break nothing: " + strings.Join(safe, "; ") + ".\n")
	}
	return b.String()
}

// versionRe finds the SPIN version a page's table was written with.
var versionRe = regexp.MustCompile(`Explored by SPIN (\S+),`)

// checkGuaranteesPage compares the page's generated part with what this
// run found, or writes it (-update). State counts depend on SPIN's version:
// written with another version, only the rest is compared.
func checkGuaranteesPage(t *testing.T, models []*model, found map[string]*outcome, version string) {
	t.Helper()
	data, err := os.ReadFile(guaranteesPage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	head, rest, ok := strings.Cut(page, tableBegin+"\n")
	if !ok {
		t.Fatalf("%s has no line %q: the models' table has nowhere to go", guaranteesPage, tableBegin)
	}
	table, tail, ok := strings.Cut(rest, tableEnd)
	if !ok {
		t.Fatalf("%s has no line %q after the begin marker", guaranteesPage, tableEnd)
	}
	want := modelsTable(models, found, version)
	if *update {
		if table != want {
			if err := os.WriteFile(guaranteesPage, []byte(head+tableBegin+"\n"+want+tableEnd+tail), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote the models' table of %s", guaranteesPage)
		}
		return
	}
	if table == want {
		return
	}
	if v := versionRe.FindStringSubmatch(table); v != nil && v[1] != version {
		numbers := regexp.MustCompile(`\| \d+ \| \d+ \| \d+ \|`)
		mask := func(s string) string {
			return numbers.ReplaceAllString(versionRe.ReplaceAllString(s, "Explored by SPIN X,"), "| N | N | N |")
		}
		if mask(table) == mask(want) {
			t.Logf("%s was written with SPIN %s, this is %s: its state counts are not compared", guaranteesPage, v[1], version)
			return
		}
	}
	t.Errorf("%s: the models' table differs from what SPIN explored; run `make docs`.\n got:\n%s\nwant:\n%s", guaranteesPage, table, want)
}

// TestModelsDeclareWhatTheyCheck reads every model's declarations without
// running SPIN: each property asserted and broken by a mutation, each
// mutation used, each step named (loadModels fails otherwise).
func TestModelsDeclareWhatTheyCheck(t *testing.T) {
	for _, m := range loadModels(t) {
		if len(m.props) == 0 || len(m.muts) == 0 {
			t.Errorf("%s declares no property or no mutation", m.name)
		}
		if len(m.sqls) == 0 {
			t.Errorf("%s names no SQL statement (@sql): it models no statement of internal/driver/sql", m.name)
		}
	}
}
