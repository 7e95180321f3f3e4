package app

import (
	"os"
	"reflect"
	"testing"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/ingest/kafka"
	"github.com/inboxd/inboxd/worker"
)

// testDatabaseURL is the one variable without a default that Load needs.
const testDatabaseURL = "INBOXD_DATABASE_URL=postgres://u@db/inbox"

// An empty environment translates into exactly what the engines make of a
// zero configuration (their WithDefaults), so a default cannot be changed
// in one place only: config takes the engines' Default* constants, and
// workerConfig, ingestConfig and retentionConfig pass every setting on.
func TestEmptyEnvironmentGivesTheEngineDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.Load([]string{testDatabaseURL})
	if err != nil {
		t.Fatal(err)
	}
	checkEngineDefaults(t, "an empty environment", c)
}

// The defaults `inboxd help` shows, and those of docs/configuration.md,
// set as the environment, are the engines' defaults too: they show what
// the engines run with.
func TestHelpAndPageShowTheEngineDefaults(t *testing.T) {
	t.Parallel()
	code, out, _ := runMain(t, nil, "help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	page, err := os.ReadFile("../../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for source, vars := range map[string][]docVariable{
		"the defaults `inboxd help` shows":         helpVariables(t, out),
		"the defaults docs/configuration.md shows": pageVariables(t, string(page)),
	} {
		environ := []string{testDatabaseURL}
		for _, v := range vars {
			if v.def != "" {
				environ = append(environ, v.name+"="+v.def)
			}
		}
		if len(environ) < 20 {
			t.Fatalf("%s: only %d defaults parsed", source, len(environ)-1)
		}
		c, err := config.Load(environ)
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		checkEngineDefaults(t, source, c)
	}
}

// checkEngineDefaults checks that c translates into the engines' defaults.
// Two ingest settings have no engine default, being the daemon's own: the
// consumer group (INBOXD_KAFKA_GROUP) and the deduplication window checked
// against the topics (INBOXD_RETENTION).
func checkEngineDefaults(t *testing.T, source string, c config.Config) {
	t.Helper()
	if got, want := noFuncs(workerConfig(c).WithDefaults()), noFuncs(worker.Config{}.WithDefaults()); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: the worker runs with\n%+v\nnot its defaults\n%+v", source, got, want)
	}
	if got, want := noFuncs(retentionConfig(c).WithDefaults()), noFuncs(worker.RetentionConfig{}.WithDefaults()); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: retention runs with\n%+v\nnot its defaults\n%+v", source, got, want)
	}
	in := ingestConfig(c).WithDefaults()
	if in.Group != "inboxd" || in.DedupWindow != worker.DefaultRetention {
		t.Errorf("%s: ingest group %q, deduplication window %s; want inboxd and %s", source, in.Group, in.DedupWindow, worker.DefaultRetention)
	}
	want := kafka.Config{Group: in.Group, DedupWindow: in.DedupWindow}.WithDefaults()
	if !reflect.DeepEqual(in, want) {
		t.Errorf("%s: ingest runs with\n%+v\nnot its defaults\n%+v", source, in, want)
	}
}

// noFuncs returns v with its exported func fields (Config.Now,
// RetentionConfig.BlockingTypes) set to nil, which DeepEqual cannot
// compare otherwise.
func noFuncs[T any](v T) T {
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		if f := rv.Field(i); f.Kind() == reflect.Func && f.CanSet() {
			f.Set(reflect.Zero(f.Type()))
		}
	}
	return v
}
