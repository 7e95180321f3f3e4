package archcheck

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/testkit"
)

// root is the tree measured: this repository, or the one
// INBOXD_ARCHCHECK_ROOT names (another checkout, to compare: its figures
// are then reported, not held to the ceilings below).
func root(t *testing.T) (dir string, own bool) {
	t.Helper()
	if dir := os.Getenv("INBOXD_ARCHCHECK_ROOT"); dir != "" {
		return dir, false
	}
	dir, err := testkit.ModuleDir("github.com/inboxd/inboxd")
	if err != nil {
		t.Fatal(err)
	}
	return dir, true
}

// publicPackages lists the directories, relative to root, of the packages
// an embedder can import beside the root package, handlers and migrations:
// every package of the main module outside internal/ and cmd/.
func publicPackages(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		top, _, _ := strings.Cut(rel, "/")
		switch {
		case rel == ".":
			return nil
		case top == "internal" || top == "cmd" || top == "handlers" || top == "migrations" || top == "docs" ||
			d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), "."):
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
			return filepath.SkipDir // a module of its own (deploy)
		}
		if matches, _ := filepath.Glob(filepath.Join(path, "*.go")); len(matches) > 0 {
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(dirs)
	return dirs
}

// The ceilings of the exported funcs, types and methods (go doc -all) of
// the packages beside the root, handlers and migrations. They only come
// down: worker exports its settings alone (28 before the engine moved to
// internal/); ingest exports the settings every source shares (67 when
// issue 26 counted it, 73 when its sources half began, 33 once the running
// types, the broker code and the mappers only ingest uses went inside, 4
// once each source became a package and the core went to
// internal/ingestcore); each source's package its Config and New (kafka
// also SASLConfig with its String and GoString, and Config.WithDefaults;
// webhook its SourceConfig and Field: the sources file is the daemon's,
// internal/opfiles/webhookfile), their settings validated inside Open, and
// kafka, amqp and nats their outbox publisher's Publisher (the 3 of
// ingest/outboxpub, gone); ingest/source the contract; config is the daemon's variables (19
// when issue 26 counted, 22 before the variables' help went to
// internal/vardocs and LogText, MigrateEnviron to cmd/inboxd/app; Defaults
// is new, the help's defaults). The target for the total was 50.
var (
	exportedCeilings = map[string]int{"worker": 9, "ingest": 4, "ingest/kafka": 7, "ingest/amqp": 3, "ingest/nats": 3,
		"ingest/webhook": 4, "ingest/source": 4, "config": 15}
	exportedTotal = 49
)

// handlersCeilings hold the handler API (not in the total: it is the API
// an embedder writes handlers against) to what it exports, after the
// routes file's parser (LoadRoutes, ParseRoutes, JoinErrors) moved to
// internal/opfiles and tracing's environment set-up (Setup and its
// options) to internal/otelenv: handlers 63 before, tracing 10. The test
// kit, handlers/handlertest, is new (7: Insert, Lookup, WaitFor, Work, Row,
// Outcome, Outcome.Attempted).
//
// handlers 62 -> 74 and handlers/riverjob 11 -> 12 for batch routes (issue
// 30): BatchHandler and TxBatchHandler with their Func adapters and
// methods (as Handler and TxHandler have), RowErrors and its Error, Batch,
// Batching, Registry.HandleBatch and HandleTxBatch; Inserter.InsertJobs.
var handlersCeilings = map[string]int{"handlers": 74, "handlers/tracing": 6, "handlers/riverjob": 12, "handlers/handlertest": 7}

// TestExportedSurface counts what an embedder sees outside the root
// package, handlers and migrations, and holds each package (and the total)
// to its ceiling. With -v it prints the figures.
func TestExportedSurface(t *testing.T) {
	t.Parallel()
	dir, own := root(t)
	total := 0
	for _, pkg := range publicPackages(t, dir) {
		n, err := Exported(filepath.Join(dir, pkg))
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		total += n
		t.Logf("%-24s %3d exported funcs, types and methods", pkg, n)
		if ceiling, ok := exportedCeilings[pkg]; own && ok && n > ceiling {
			t.Errorf("%s exports %d funcs, types and methods, more than its ceiling %d", pkg, n, ceiling)
		}
	}
	t.Logf("%-24s %3d (ceiling %d)", "total", total, exportedTotal)
	for pkg, ceiling := range handlersCeilings {
		n, err := Exported(filepath.Join(dir, pkg))
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		t.Logf("%-24s %3d exported funcs, types and methods (not in the total)", pkg, n)
		if own && n > ceiling {
			t.Errorf("%s exports %d funcs, types and methods, more than its ceiling %d", pkg, n, ceiling)
		}
	}
	if own && total > exportedTotal {
		t.Errorf("the packages beside the root, handlers and migrations export %d funcs, types and methods, more than %d", total, exportedTotal)
	}
}

// maxMethods is the most methods a type's non-test code may declare.
const maxMethods = 25

// TestNoTypeOverMethods holds every type of the repository's non-test code
// (its nested modules included) to maxMethods methods. With -v it prints the widest.
func TestNoTypeOverMethods(t *testing.T) {
	t.Parallel()
	dir, own := root(t)
	types, err := Methods(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, tm := range types {
		if i < 5 {
			t.Logf("%-40s %3d methods", tm.Type, tm.Methods)
		}
		if own && tm.Methods > maxMethods {
			t.Errorf("%s declares %d methods, more than %d", tm.Type, tm.Methods, maxMethods)
		}
	}
}

// internalInAPIAllowed lists the uses of an internal type in an exported
// API that are known and owned by work under way, by package directory.
// An entry that no longer occurs is reported (remove it); a new use fails.
var internalInAPIAllowed = map[string][]string{}

// TestNoInternalTypeInAPI fails when an exported func, method, type, field
// or var of a package an embedder can import (the root, handlers and its
// subpackages, worker, ingest, config, migrations) names a type of a
// package under internal/: the embedder could get such a value but never
// name its type (as inboxd.PausedRoute = driver.PausedRoute did).
func TestNoInternalTypeInAPI(t *testing.T) {
	t.Parallel()
	dir, own := root(t)
	pkgs := append([]string{"."}, publicPackages(t, dir)...)
	for _, top := range []string{"handlers", "migrations"} {
		err := filepath.WalkDir(filepath.Join(dir, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if matches, _ := filepath.Glob(filepath.Join(path, "*.go")); len(matches) > 0 {
				rel, _ := filepath.Rel(dir, path)
				pkgs = append(pkgs, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, pkg := range pkgs {
		uses, err := InternalInAPI(filepath.Join(dir, pkg))
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		allowed, seen := internalInAPIAllowed[pkg], map[string]bool{}
	uses:
		for _, u := range uses {
			for _, a := range allowed {
				if strings.Contains(u, a) {
					seen[a] = true
					continue uses
				}
			}
			if own {
				t.Errorf("%s: %s: an internal type in the exported API", pkg, u)
			} else {
				t.Logf("%s: %s", pkg, u)
			}
		}
		for _, a := range allowed {
			if !seen[a] && own {
				t.Logf("%s: the allowance %q is no longer used: remove it from internalInAPIAllowed", pkg, a)
			}
		}
	}
}

// initAllowed lists the files whose init() is allowed, each with why: an
// init() runs on import, so a package an embedder imports must not have
// one (issue 26: a global set from worker/diag.go's init hid ExplainClaim).
var initAllowed = map[string]string{
	// The command table refers to the help command, which lists the table:
	// a var initializer would be an initialization cycle. It sets nothing
	// outside the package.
	"cmd/inboxd/app/main.go": "the command table",
	// zerolog's encoding settings are process-wide; the daemon's package
	// is the one place that sets them (never imported by an embedder).
	"cmd/inboxd/app/logging.go": "zerolog's duration and time formats",
}

// TestNoInit fails on a func init() in non-test code (nested modules
// included) outside initAllowed.
func TestNoInit(t *testing.T) {
	t.Parallel()
	dir, own := root(t)
	files, err := Inits(dir)
	if err != nil {
		t.Fatal(err)
	}
	if own && len(files) == 0 {
		t.Fatal("no init() found, not even initAllowed's: the check no longer sees them")
	}
	for _, f := range files {
		if _, ok := initAllowed[f]; !ok && own {
			t.Errorf("%s: func init(): initialise explicitly (a constructor, a var), or say why in initAllowed", f)
		}
	}
}

// composites are services whose Start starts services of their own
// (startstop.StartAll) rather than goroutines: they keep the contract
// without the base, and their tests run startstoptest.Contract too.
var composites = map[string]bool{
	"internal/maintenance.Services": true, // the rescuer, the sweeper, the stats
}

// TestServicesShareTheBase fails when a type of non-test code declares
// Start(ctx, ...) without embedding startstop.Base (the one start/stop
// base; its shared test is startstoptest.Contract): a service that writes
// its own cancel and WaitGroup. Types with the other contract, Run(ctx),
// are listed with -v.
func TestServicesShareTheBase(t *testing.T) {
	t.Parallel()
	dir, own := root(t)
	services, err := Services(dir)
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	for _, s := range services {
		switch {
		case s.Method == "Run":
			t.Logf("%-40s Run(ctx)", s.Type)
		case !s.Base && !composites[s.Type] && own:
			t.Errorf("%s declares Start without embedding startstop.Base", s.Type)
		default:
			starts++
		}
	}
	t.Logf("%d services on startstop.Base (composites included)", starts)
	if own && starts == 0 {
		t.Error("no service found: the check no longer sees them")
	}
}
