// Package vardocs is the help of the daemon's INBOXD_* variables, drawn
// from config.Config (its fields' env and help tags, the defaults Load
// gives them): the list `inboxd help` prints (Variables, Sections), the
// table of docs/configuration.md (MarkdownTable) and the warnings about
// variables inboxd does not read (Warnings). Package config parses and
// validates; this package only describes.
package vardocs

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/opfiles"
)

// Variable describes one INBOXD_* environment variable, for `inboxd help`.
type Variable struct {
	// Name is the variable, e.g. INBOXD_LEASE.
	Name string
	// Default is the value used when the variable is unset or empty; "" when
	// there is none.
	Default string
	// Help says in one line what the variable means.
	Help string
}

// commandVariables are the variables that are not fields of Config because
// only one command reads them (see MigrateEnviron).
var commandVariables = []Variable{
	{Name: "INBOXD_MIGRATE_DATABASE_URL", Help: "connection string `inboxd migrate` uses instead of INBOXD_DATABASE_URL (the migrator role)"},
	{Name: "INBOXD_MIGRATE_DATABASE_URL_FILE", Help: "file holding it, used when INBOXD_MIGRATE_DATABASE_URL is empty"},
}

// Variables returns every INBOXD_* variable inboxd reads: the fields of
// Config in their order, from their env and help tags, with the default
// Load gives them (the field's envDefault tag as written, or the engine's
// default),
// then the variables only one command reads. It is the one source of
// `inboxd help`'s list, so the list cannot drift from what Load reads.
func Variables() []Variable {
	t := reflect.TypeFor[config.Config]()
	def := reflect.ValueOf(config.Defaults())
	out := make([]Variable, 0, t.NumField()+len(commandVariables))
	seen := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if name == "" || name == "-" {
			continue
		}
		seen[name] = true
		d, ok := f.Tag.Lookup("envDefault")
		if !ok {
			d = formatDefault(def.Field(i))
		}
		out = append(out, Variable{Name: name, Default: d, Help: f.Tag.Get("help")})
	}
	for _, v := range commandVariables {
		if !seen[v.Name] { // in case Config gains the field one day
			out = append(out, v)
		}
	}
	return out
}

// formatDefault writes a default as the variable would be set to it:
// durations in their shortest Go syntax (5m, not 5m0s; 0 for none), lists
// comma-separated, "" for an empty string or list.
func formatDefault(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return opfiles.Duration(x)
	case []string:
		return strings.Join(x, ",")
	case string:
		return x
	}
	return fmt.Sprint(v.Interface())
}

// ignoredPrefixes are INBOXD_ variables that belong to the test suites, the
// benchmarks and the demo, never to the daemon: Warnings says nothing about
// them.
var ignoredPrefixes = []string{"INBOXD_TEST_", "INBOXD_FAULT", "INBOXD_DEMO_", "INBOXD_BENCH_"}

// Warnings returns one line for every variable of environ (KEY=value pairs)
// that looks like an inboxd variable but is not one inboxd reads, naming the
// closest known variable when one is close, e.g.
//
//	INBOXD_ROUTE is not an inboxd variable and is ignored; did you mean INBOXD_ROUTES?
//
// Variables of the test suites, benchmarks and demo (INBOXD_TEST_*,
// INBOXD_FAULT*, INBOXD_DEMO_*, INBOXD_BENCH_*) are not warned about. A
// misspelling is a warning, never an error: the configuration it would have
// changed is still validated by Load.
func Warnings(environ []string) []string {
	vars := Variables()
	known := make(map[string]bool, len(vars))
	names := make([]string, 0, len(vars))
	for _, v := range vars {
		known[v.Name] = true
		names = append(names, v.Name)
	}
	var out []string
	warned := make(map[string]bool)
	for _, kv := range environ {
		key, _, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(key)
		if !strings.HasPrefix(upper, "INBOXD_") || known[key] || warned[key] || ignored(upper) {
			continue
		}
		warned[key] = true
		msg := fmt.Sprintf("%s is not an inboxd variable and is ignored", key)
		switch {
		case known[upper]:
			msg += fmt.Sprintf("; variable names are case-sensitive: did you mean %s?", upper)
		default:
			if s := closest(upper, names); s != "" {
				msg += fmt.Sprintf("; did you mean %s?", s)
			}
		}
		out = append(out, msg)
	}
	return out
}

func ignored(name string) bool {
	for _, p := range ignoredPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// closest returns the known name nearest to name, or "" when none is close
// enough to be a likely misspelling: within an edit distance that grows
// with the length (1 for short names, at most 3), or the one known name that
// ends with name's suffix (INBOXD_TOPICS for INBOXD_KAFKA_TOPICS).
func closest(name string, known []string) string {
	suffix := strings.TrimPrefix(name, "INBOXD_")
	if suffix == "" {
		return ""
	}
	limit := min(3, 1+len(suffix)/6)
	best, bestDist := "", limit+1
	sorted := append([]string(nil), known...)
	sort.Strings(sorted)
	for _, k := range sorted {
		if d := editDistance(suffix, strings.TrimPrefix(k, "INBOXD_")); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return best
	}
	var ends []string
	for _, k := range sorted {
		if strings.HasSuffix(k, "_"+suffix) {
			ends = append(ends, k)
		}
	}
	if len(ends) == 1 {
		return ends[0]
	}
	return ""
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// bytes each cost 1.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
