package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/internal/testkit"
)

// SIGHUP reloads the routes file: a type that went dead goes to its new
// route; a file that does not load keeps the old routes, says why, and the
// daemon goes on.
func TestSIGHUPReloadsRoutes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	routes := writeRoutes(t, "routes:\n  - type: known\n    handler: ignore\ndefault: dead\n")
	d := startDaemon(t, "INBOXD_DATABASE_URL="+db.URL, "INBOXD_ROUTES="+routes)
	insert := func(id, typ string) {
		t.Helper()
		if _, err := db.Pool.Exec(context.Background(),
			`INSERT INTO inbox (source, event_id, event_type) VALUES ('s', $1, $2)`, id, typ); err != nil {
			t.Fatal(err)
		}
	}
	status := func(id string) func() string {
		return func() string { s, _ := rowStatus(t, db, id); return s }
	}
	insert("before", "late.type")
	waitFor(t, 10*time.Second, "unrouted row dead", func() bool { return status("before")() == "dead" })

	if err := os.WriteFile(routes, []byte("routes:\n  - type: known\n    handler: ignore\n  - type: late.type\n    handler: ignore\ndefault: dead\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "reload logged", func() bool { return strings.Contains(d.Logs(), "routes reloaded") })
	insert("after", "late.type")
	waitFor(t, 10*time.Second, "newly routed row processed", func() bool { return status("after")() == "processed" })

	if err := os.WriteFile(routes, []byte("routes:\n  - type: late.type\n    handler: teleport\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "refusal logged", func() bool { return strings.Contains(d.Logs(), "routes not reloaded") })
	if !strings.Contains(d.Logs(), "teleport") {
		t.Errorf("the refusal does not say what is wrong with the file:\n%s", d.Logs())
	}
	insert("kept", "late.type")
	waitFor(t, 10*time.Second, "old routes still in force", func() bool { return status("kept")() == "processed" })
	if code := terminate(t, d, 30*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}
}

// Permanent database errors at start are named as they are and end the
// process with a failure, so that a crash loop shows the cause; they used to
// be retried for ever as "database not reachable yet".
func TestPermanentDatabaseErrorExits(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "run")
	cmd.Env = append(testkit.CleanEnv(), "INBOXD_DATABASE_URL="+pgtest.WithDatabase(pgtest.AdminURL(), "inboxd_no_such_db"), "INBOXD_HTTP_ADDR=",
		"INBOXD_ROUTES="+writeRoutes(t, "default: ignore\n"))
	var logs syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("still running after 40s against a database that does not exist:\n%s", logs.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	out := logs.String()
	if !strings.Contains(out, "3D000") || !strings.Contains(out, `database \"inboxd_no_such_db\" does not exist`) || !strings.Contains(out, "create the database first") {
		t.Errorf("the error is not named as it is:\n%s", out)
	}
	// Every line of the crash loop is structured: the retries, with their
	// delay's unit, and the last line, the cause.
	lines := logLines(t, "a crash loop", out)
	retries := withMessage(lines, "database refuses the connection")
	if len(retries) == 0 {
		t.Fatalf("no retry line:\n%s", out)
	}
	if d, err := time.ParseDuration(fmt.Sprint(retries[0]["retry_in"])); err != nil || d <= 0 {
		t.Errorf("retry_in %v is not a duration with its unit", retries[0]["retry_in"])
	}
	if last := lines[len(lines)-1]; last["level"] != "error" || !strings.Contains(fmt.Sprint(last["error"]), "3D000") {
		t.Errorf("the last line does not name the cause: %v", last)
	}
	t.Logf("exited after %s", time.Since(start).Round(time.Millisecond))
}
