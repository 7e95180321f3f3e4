package vardocs

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/opfiles"
)

func TestWarningsNameTheClosestVariable(t *testing.T) {
	t.Parallel()
	got := Warnings([]string{
		dsn,
		"INBOXD_ROUTE=routes.yaml",      // one letter short
		"INBOXD_WOKRERS=8",              // transposed
		"INBOXD_STATEMENT_TIMOUT=5s",    // a letter missing in a long name
		"INBOXD_TOPICS=orders",          // the suffix of exactly one variable
		"inboxd_workers=8",              // wrong case
		"INBOXD_SOMETHING_ELSE=1",       // nothing close
		"INBOXD_ROUTE=again",            // warned once
		"INBOXD_TEST_DATABASE_URL=x",    // tests
		"INBOXD_FAULT=1",                // fault suite
		"INBOXD_FAULT_LONG=1",           //
		"INBOXD_DEMO_DATABASE_URL=x",    // demo
		"INBOXD_BENCH_EVENTS=1000",      // benchmarks
		"INBOXD_MIGRATE_DATABASE_URL=x", // read by migrate
		"PATH=/bin",
		"INBOXD_LEASE=30s",
	})
	want := []string{
		"INBOXD_ROUTE is not an inboxd variable and is ignored; did you mean INBOXD_ROUTES?",
		"INBOXD_WOKRERS is not an inboxd variable and is ignored; did you mean INBOXD_WORKERS?",
		"INBOXD_STATEMENT_TIMOUT is not an inboxd variable and is ignored; did you mean INBOXD_STATEMENT_TIMEOUT?",
		"INBOXD_TOPICS is not an inboxd variable and is ignored; did you mean INBOXD_KAFKA_TOPICS?",
		"inboxd_workers is not an inboxd variable and is ignored; variable names are case-sensitive: did you mean INBOXD_WORKERS?",
		"INBOXD_SOMETHING_ELSE is not an inboxd variable and is ignored",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if w := Warnings(os.Environ()); len(w) > 0 {
		t.Logf("this process's own environment has warnings (not an error): %q", w)
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"ROUTE", "ROUTES", 1}, {"LAESE", "LEASE", 1}, {"LEASE", "LEASE", 0},
		{"KITTEN", "SITTING", 3}, {"", "ABC", 3}, {"ABC", "", 3},
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// Every variable Load reads has a one-line help text, and Variables lists
// each exactly once, with its default.
func TestVariablesDescribeEveryField(t *testing.T) {
	t.Parallel()
	vars := Variables()
	byName := make(map[string]Variable, len(vars))
	for _, v := range vars {
		if _, dup := byName[v.Name]; dup {
			t.Errorf("%s listed twice", v.Name)
		}
		byName[v.Name] = v
		if v.Help == "" || strings.ContainsAny(v.Help, "\n\t") {
			t.Errorf("%s: help %q must be one non-empty line (add a help:\"…\" tag to its field)", v.Name, v.Help)
		}
	}
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		v, ok := byName[name]
		if !ok {
			t.Errorf("field %s (%s) missing from Variables", f.Name, name)
			continue
		}
		if tag, ok := f.Tag.Lookup("envDefault"); ok && v.Default != tag {
			t.Errorf("%s: default %q, want its envDefault tag %q", name, v.Default, tag)
		}
	}
	if byName["INBOXD_LEASE"].Default != "30s" {
		t.Errorf("INBOXD_LEASE default = %q", byName["INBOXD_LEASE"].Default)
	}
	if _, ok := byName["INBOXD_MIGRATE_DATABASE_URL"]; !ok {
		t.Error("INBOXD_MIGRATE_DATABASE_URL missing")
	}
}

// The default Variables shows for a variable is the value Load gives it
// when it is unset: setting the variable to the default shown changes
// nothing. So `inboxd help` and docs/configuration.md show the engines'
// defaults (worker.DefaultLease, …), which Load starts from.
func TestVariablesShowTheDefaultsLoadApplies(t *testing.T) {
	t.Parallel()
	unset, err := config.Load([]string{dsn})
	if err != nil {
		t.Fatal(err)
	}
	byName := make(map[string]Variable)
	for _, v := range Variables() {
		byName[v.Name] = v
	}
	ct := reflect.TypeFor[config.Config]()
	uv := reflect.ValueOf(unset)
	for i := range ct.NumField() {
		name, _, _ := strings.Cut(ct.Field(i).Tag.Get("env"), ",")
		v := byName[name]
		if v.Default == "" {
			if name != "INBOXD_DATABASE_URL" && !uv.Field(i).IsZero() { // the one set here
				t.Errorf("%s: no default shown, but Load gives it %v", name, uv.Field(i))
			}
			continue
		}
		set, err := config.Load([]string{dsn, name + "=" + v.Default})
		if err != nil {
			t.Errorf("%s=%s (the default shown): %v", name, v.Default, err)
			continue
		}
		if got, want := reflect.ValueOf(set).Field(i).Interface(), uv.Field(i).Interface(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the default shown, %q, loads as %v; unset, it is %v", name, v.Default, got, want)
		}
	}
	for name, want := range map[string]string{ // spot checks of the format
		"INBOXD_LEASE": "30s", "INBOXD_BACKOFF_MAX": "5m", "INBOXD_RETENTION": "168h", "INBOXD_RETENTION_INTERVAL": "1m",
		"INBOXD_POLL_INTERVAL": "500ms", "INBOXD_DEAD_RETENTION": "0", "INBOXD_PREFETCH": "0",
		"INBOXD_EVENT_ID_HEADERS": "event_id,ce_id", "INBOXD_CLAIM_BYTES": "33554432", "INBOXD_KAFKA_CLIENT_ID": "inboxd",
	} {
		if got := byName[name].Default; got != want {
			t.Errorf("%s: default shown %q, want %q", name, got, want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0", 10 * time.Second: "10s", 90 * time.Second: "1m30s", 5 * time.Minute: "5m", 168 * time.Hour: "168h",
		90 * time.Minute: "1h30m", time.Hour + time.Second: "1h0m1s", 50 * time.Millisecond: "50ms", 1500 * time.Millisecond: "1.5s",
	} {
		if got := opfiles.Duration(d); got != want {
			t.Errorf("opfiles.Duration(%s) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(opfiles.Duration(d)); err != nil || back != d {
			t.Errorf("opfiles.Duration(%s) = %q does not parse back: %v, %v", d, opfiles.Duration(d), back, err)
		}
	}
}

// Help texts that quote a constant of the code quote its value.
func TestHelpQuotesTheConstants(t *testing.T) {
	t.Parallel()
	byName := make(map[string]Variable)
	for _, v := range Variables() {
		byName[v.Name] = v
	}
	engine := fmt.Sprint(config.EngineConns)
	if h := byName["INBOXD_DATABASE_MAX_CONNS"].Help; !strings.Contains(h, engine+" for the engine") || !strings.Contains(h, "0 = "+engine+" + ") {
		t.Errorf("INBOXD_DATABASE_MAX_CONNS: help %q does not say EngineConns (%d)", h, config.EngineConns)
	}
}

// dsn is the one variable Load requires.
const dsn = "INBOXD_DATABASE_URL=postgres://inboxd:s3cret@db.internal:5432/app?sslmode=disable"
