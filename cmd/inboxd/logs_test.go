package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// logLines parses every line of a daemon's output as one JSON object and
// fails the test naming each line that is not one.
func logLines(t *testing.T, what, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for i, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("%s: line %d is not a JSON object (%v): %s", what, i+1, err, l)
			continue
		}
		lines = append(lines, m)
	}
	if len(lines) == 0 {
		t.Errorf("%s: no log line at all", what)
	}
	return lines
}

// withMessage returns the lines whose message is msg.
func withMessage(lines []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l["message"] == msg {
			out = append(out, l)
		}
	}
	return out
}

// Every line `inboxd run` writes is structured: the warning about an
// unknown variable, the start-up line, the signal, the shutdown; a bad
// setting; and (TestPermanentDatabaseErrorExits) a crash loop on a
// database that does not exist. The
// start-up line lists each source as configured (it said "ingest":false
// with RabbitMQ configured), and durations carry their unit.
func TestEveryLineOfRunIsJSON(t *testing.T) {
	t.Parallel()
	t.Run("start-up and shutdown", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		amqpURL, _, queue := rabbitQueue(t)
		d := startDaemon(t, "INBOXD_DATABASE_URL="+db.URL, "INBOXD_ROUTES="+writeRoutes(t, "default: ignore\n"),
			"INBOXD_AMQP_URL="+amqpURL, "INBOXD_AMQP_QUEUES="+queue, "INBOXD_ROUTE=typo.yaml", "INBOXD_LEASE=45s")
		if code := terminate(t, d, 30*time.Second); code != 0 {
			t.Fatalf("exit code after SIGTERM = %d, want 0", code)
		}
		lines := logLines(t, "run", d.Logs())
		start := withMessage(lines, "starting")
		if len(start) != 1 {
			t.Fatalf("%d start-up lines, want 1", len(start))
		}
		srcs, _ := json.Marshal(start[0]["sources"])
		if want := `[{"kind":"rabbitmq","queues":["` + queue + `"]}]`; string(srcs) != want {
			t.Errorf("start-up line's sources %s, want %s", srcs, want)
		}
		if _, ok := start[0]["ingest"]; ok {
			t.Errorf("start-up line still has the Kafka-only ingest field: %v", start[0])
		}
		if start[0]["lease"] != "45s" || start[0]["retention"] != "168h0m0s" {
			t.Errorf("durations without their unit: lease %v, retention %v", start[0]["lease"], start[0]["retention"])
		}
		if w := withMessage(lines, "INBOXD_ROUTE is not an inboxd variable and is ignored; did you mean INBOXD_ROUTES?"); len(w) != 1 || w[0]["variable"] != "INBOXD_ROUTE" || w[0]["level"] != "warn" {
			t.Errorf("the unknown variable's warning: %v", w)
		}
		if s := withMessage(lines, "stopping (send the signal again to exit at once)"); len(s) != 1 || s[0]["signal"] != "terminated" {
			t.Errorf("the signal's line: %v", s)
		}
		if len(withMessage(lines, "stopped")) == 0 {
			t.Error("no line says the daemon stopped")
		}
		for _, l := range lines {
			if strings.Contains(l["message"].(string), "no source") {
				t.Errorf("a daemon with a source warns that it has none: %v", l)
			}
		}
	})
	t.Run("no source, no outbox", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		d := startDaemon(t, "INBOXD_DATABASE_URL="+db.URL, "INBOXD_ROUTES="+writeRoutes(t, "default: ignore\n"), "INBOXD_AMQP_QUEUE=orders")
		if code := terminate(t, d, 30*time.Second); code != 0 {
			t.Fatalf("exit code after SIGTERM = %d, want 0", code)
		}
		lines := logLines(t, "run", d.Logs())
		var warned []map[string]any
		for _, l := range lines {
			if strings.HasPrefix(l["message"].(string), "no source") {
				warned = append(warned, l)
			}
		}
		if len(warned) != 1 || warned[0]["level"] != "warn" {
			t.Errorf("want one warn line saying there is no source, got %v", warned)
		}
		if srcs, _ := json.Marshal(withMessage(lines, "starting")[0]["sources"]); string(srcs) != "[]" {
			t.Errorf("sources %s, want []", srcs)
		}
	})
	t.Run("bad setting", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(binary, "run")
		cmd.Env = append(testkit.CleanEnv(), "INBOXD_DATABASE_URL=postgres://x@127.0.0.1:1/db", "INBOXD_LEASE=5", "INBOXD_WORKERS=0")
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Fatalf("exit: %v, want status 2\n%s", err, out)
		}
		var vars []string
		for _, l := range logLines(t, "a bad setting", string(out)) {
			if l["level"] == "error" {
				vars = append(vars, l["variable"].(string))
			}
		}
		slices.Sort(vars)
		if !slices.Equal(vars, []string{"INBOXD_LEASE", "INBOXD_WORKERS"}) {
			t.Errorf("error lines name %q, want one per bad setting\n%s", vars, out)
		}
	})
	// The crash loop's lines: TestPermanentDatabaseErrorExits reads them
	// with logLines too.
}

// A second signal exits at once, and says so in a structured line.
func TestSecondSignalLineIsJSON(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	// A handler that holds its row until the test ends keeps the first
	// shutdown waiting (for INBOXD_SHUTDOWN_TIMEOUT), so the second signal
	// always arrives while it does.
	sink := newSink(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	sink.SetHook(func(http.ResponseWriter, *http.Request, testkit.Delivery) bool { <-release; return false })
	routes := writeRoutes(t, "routes:\n  - type: slow\n    handler: http\n    url: "+sink.URL+"\n    timeout: 5m\ndefault: ignore\n")
	d := startDaemon(t, "INBOXD_DATABASE_URL="+db.URL, "INBOXD_ROUTES="+routes, "INBOXD_SHUTDOWN_TIMEOUT=2m")
	if _, err := db.Pool.Exec(context.Background(),
		`INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('t', 'held', 'slow', '{}')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the held row's handler running", func() bool { return len(sink.Deliveries()) == 1 })
	d.Signal(syscall.SIGINT)
	testkit.WaitFor(t, 10*time.Second, "the first signal logged", func() bool { return strings.Contains(d.Logs(), `"signal":"interrupt"`) })
	d.Signal(syscall.SIGINT)
	if exited, _ := d.WaitExit(30 * time.Second); !exited {
		t.Fatal("still running after a second SIGINT")
	}
	lines := logLines(t, "two signals", d.Logs())
	if s := withMessage(lines, "second signal: exiting at once, rows still held return when their leases expire"); len(s) != 1 {
		t.Errorf("the second signal's line: %v", s)
	}
}

// With INBOXD_LOG_FORMAT=text every line of `inboxd run` is zerolog's human
// format (time, level, message, fields), without colour codes when the
// output is not a terminal, and none is JSON or the old plain
// "inboxd: …" lines: the warning written before the configuration is
// read, the start-up line, the signal and the shutdown.
func TestTextLogFormat(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	d := startDaemon(t, "INBOXD_DATABASE_URL="+db.URL, "INBOXD_ROUTES="+writeRoutes(t, "default: ignore\n"),
		"INBOXD_LOG_FORMAT=text", "INBOXD_ROUTE=typo.yaml", "INBOXD_LEASE=45s")
	if code := terminate(t, d, 30*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}
	line := regexp.MustCompile(`^\d\d:\d\d:\d\d (TRC|DBG|INF|WRN|ERR|FTL) \S`)
	out := strings.TrimRight(d.Logs(), "\n")
	for i, l := range strings.Split(out, "\n") {
		if !line.MatchString(l) || strings.Contains(l, "\x1b[") {
			t.Errorf("line %d is not the text format (time, level, message; no colour codes): %q", i+1, l)
		}
	}
	for _, want := range []string{"WRN INBOXD_ROUTE is not an inboxd variable", "INF starting", "lease=45s", "INF stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("the text log does not say %q:\n%s", want, out)
		}
	}
}
