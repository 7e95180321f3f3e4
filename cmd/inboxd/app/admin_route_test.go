package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// route pause, list and resume: the pause is stored with who and why (by
// default $USER@host), default and * name the default route, resuming a
// route that is not paused fails, and a type without a route of its own
// in INBOXD_ROUTES gets a warning.
func TestRoutePauseListResume(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, []byte("routes:\n  - {type: order.paid, handler: ignore}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_ROUTES=" + routes, "USER=alice"}

	code, out, stderr := runMain(t, env, "route", "pause", "order.paid", "--reason", "provider down")
	if code != 0 || !strings.Contains(out, "paused order.paid (by alice@") {
		t.Fatalf("route pause: %d %q %s", code, out, stderr)
	}
	if !strings.Contains(stderr, `"command":"route pause"`) || !strings.Contains(stderr, `"route":"order.paid"`) {
		t.Errorf("route pause logged %q, want the command and route", stderr)
	}
	if code, _, stderr := runMain(t, env, "route", "pause", "default", "--by", "bob"); code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("route pause default: %d %s", code, stderr)
	}
	// A type neither the routes file nor the database knows is refused
	// (a typo): nothing is paused.
	code, _, stderr = runMain(t, env, "route", "pause", "order.nonexistent")
	if code != ExitUsage || !strings.Contains(stderr, `"order.nonexistent" is in no routes file and none of its rows was processed`) {
		t.Fatalf("route pause of an unknown type: %d %s", code, stderr)
	}
	// One the database knows (its rows had outcomes) but the routes file
	// does not: paused, with a warning.
	if _, err := db.Pool.Exec(t.Context(), `INSERT INTO route_rollup (span, at, route, processed, latency_buckets)
		VALUES (60, date_trunc('minute', now()), 'order.unrouted', 1, '{1}')`); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runMain(t, env, "route", "pause", "order.unrouted")
	if code != 0 || !strings.Contains(stderr, "warning: order.unrouted has no route of its own") {
		t.Fatalf("route pause of an unrouted type: %d %s", code, stderr)
	}

	code, out, stderr = runMain(t, env, "route", "list")
	if code != 0 {
		t.Fatalf("route list: %d %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ROUTE") || !strings.HasPrefix(lines[1], "default (*)") ||
		!strings.Contains(lines[1], "bob") || !strings.HasPrefix(lines[2], "order.paid") ||
		!strings.Contains(lines[2], "alice@") || !strings.Contains(lines[2], "provider down") {
		t.Fatalf("route list:\n%s", out)
	}
	code, out, _ = runMain(t, env, "route", "list", "--json")
	var first pausedRouteReport
	if code != 0 || json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &first) != nil ||
		first.Route != driver.DefaultRoute || first.PausedBy != "bob" || first.PausedAt.IsZero() {
		t.Fatalf("route list --json: %d %q", code, out)
	}

	if code, out, stderr := runMain(t, env, "route", "resume", "order.paid"); code != 0 || !strings.Contains(out, "resumed order.paid") {
		t.Fatalf("route resume: %d %q %s", code, out, stderr)
	}
	if code, _, stderr := runMain(t, env, "route", "resume", "order.paid"); code != ExitFailure || !strings.Contains(stderr, "order.paid is not paused") {
		t.Fatalf("second route resume: %d %s; want a failure saying it is not paused", code, stderr)
	}
	if code, _, _ := runMain(t, env, "route", "resume", "*"); code != 0 {
		t.Fatalf("route resume *: %d", code)
	}
	if code, _, _ := runMain(t, env, "route", "resume", "order.unrouted"); code != 0 {
		t.Fatalf("route resume order.unrouted: %d", code)
	}
	if code, out, _ := runMain(t, env, "route", "list"); code != 0 || strings.TrimSpace(out) != "no route is paused" {
		t.Fatalf("route list after resuming all: %d %q", code, out)
	}
}

// The route commands' usage errors: no route, two routes, no subcommand.
func TestRouteUsage(t *testing.T) {
	t.Parallel()
	env := []string{"INBOXD_DATABASE_URL=postgres://x@127.0.0.1:1/db"}
	for _, args := range [][]string{{"route", "pause"}, {"route", "pause", "a", "b"}, {"route", "resume"}, {"route"}} {
		code, _, stderr := runMain(t, env, args...)
		if code != ExitUsage {
			t.Errorf("%q: exit %d (%s), want %d", args, code, stderr, ExitUsage)
		}
	}
	if _, _, stderr := runMain(t, env, "route"); !strings.Contains(stderr, "route: give one of its commands: pause, resume, list") {
		t.Errorf("inboxd route: %s", stderr)
	}
}

// route rate, reset-breaker and limits: an override is stored under the
// operator's name (--by) in place of the routes file's rate, listed by
// route limits (table and -o json) and cleared with --clear; a rate of 0
// or less, an unknown route and a reset of a route without a breaker are
// usage errors; every change is in the audit trail.
func TestRouteRateAndResetBreaker(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, []byte("routes:\n  - {type: order.paid, handler: ignore, rate: 200/s, breaker: {failures: 5, cool_down: 1m}}\n  - {type: order.created, handler: ignore}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_ROUTES=" + routes, "USER=alice"}
	code, out, stderr := runMain(t, env, "route", "rate", "order.paid", "20", "--burst", "5", "--by", "bob")
	if code != 0 || !strings.Contains(out, "order.paid limited to 20/s (burst 5) (by bob)") {
		t.Fatalf("route rate: %d %q %s", code, out, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"route", "rate", "order.paid", "0"}, "the rate must be more than 0 rows a second, got 0"},
		{[]string{"route", "rate", "order.paid", "--", "-2"}, "the rate must be more than 0 rows a second, got -2"},
		{[]string{"route", "rate", "order.paid", "-2"}, "the rate must be more than 0 rows a second, got -2"},
		{[]string{"route", "rate", "order.paid", "-0.5", "--by", "bob"}, "the rate must be more than 0 rows a second, got -0.5"},
		{[]string{"route", "rate", "order.paid", "fast"}, `the rate "fast" is not a number`},
		{[]string{"route", "rate", "order.paid"}, "give a route and its rate"},
		{[]string{"route", "rate", "order.nonexistent", "5"}, `"order.nonexistent" is in no routes file`},
		{[]string{"route", "rate", "order.paid", "--clear", "--burst", "3"}, "--burst goes with a rate"},
		{[]string{"route", "reset-breaker", "order.created"}, "the route has no circuit breaker"},
		{[]string{"route", "reset-breaker", "order.nonexistent"}, "no such route"},
		{[]string{"route", "reset-breaker"}, "give one route"},
	} {
		if code, _, stderr := runMain(t, env, c.args...); code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: %d %s, want a usage error saying %q", c.args, code, stderr, c.want)
		}
	}
	if code, out, stderr := runMain(t, env, "route", "reset-breaker", "order.paid"); code != 0 || !strings.Contains(out, "reset the breaker of order.paid (by alice@") {
		t.Fatalf("route reset-breaker: %d %q %s", code, out, stderr)
	}
	code, out, stderr = runMain(t, env, "route", "limits")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ROUTE") || !strings.HasPrefix(lines[1], "order.created") ||
		!strings.Contains(lines[2], "20/s (burst 5)") || !strings.Contains(lines[2], "200/s") || !strings.Contains(lines[2], "bob") ||
		!strings.Contains(lines[2], "opens after 5 failures for 1m0s") || !strings.Contains(lines[2], "by alice@") {
		t.Fatalf("route limits: %d %s\n%s", code, stderr, out)
	}
	code, out, _ = runMain(t, env, "route", "limits", "-o", "json")
	var paid routeLimitReport
	if code != 0 || json.Unmarshal([]byte(strings.Split(strings.TrimSpace(out), "\n")[1]), &paid) != nil ||
		paid.Route != "order.paid" || paid.Rate != 20 || paid.Burst != 5 || paid.FileRate != 200 || paid.OverrideBy != "bob" ||
		paid.BreakerFailures != 5 || paid.BreakerResetAt == nil {
		t.Fatalf("route limits -o json: %d %q", code, out)
	}
	if code, out, stderr := runMain(t, env, "route", "rate", "order.paid", "--clear"); code != 0 || !strings.Contains(out, "cleared the rate override of order.paid") {
		t.Fatalf("route rate --clear: %d %q %s", code, out, stderr)
	}
	if code, _, stderr := runMain(t, env, "route", "rate", "order.paid", "--clear"); code != ExitFailure || !strings.Contains(stderr, "order.paid has no rate override") {
		t.Fatalf("a second --clear: %d %s", code, stderr)
	}
	var audit string
	if err := db.Pool.QueryRow(t.Context(), `SELECT string_agg(split_part(operator, '@', 1) || ' ' || action || ' ' || detail || CASE WHEN error IS NULL THEN '' ELSE ' (failed)' END, ', ' ORDER BY id) FROM ops_audit`).Scan(&audit); err != nil {
		t.Fatal(err)
	}
	if want := "bob rate_change route order.paid: rate 20/s (burst 5), alice breaker_reset route order.paid, " +
		"alice rate_change route order.paid: rate override cleared, alice rate_change route order.paid: rate override cleared (failed)"; audit != want {
		t.Errorf("audit:\n%s\nwant\n%s", audit, want)
	}
}
