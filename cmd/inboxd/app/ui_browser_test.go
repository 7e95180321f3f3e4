package app

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inboxd/inboxd/internal/console/browsertest"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/internal/testkit"
)

// consoleDaemon runs `inboxd run` (default route: ignore) with the console
// on a mux served by a test server, the token in a file; it returns the
// server's URL and the database. It stops when t ends.
func consoleDaemon(t *testing.T, token string, seed string) (string, *pgtest.DB, *syncbuf.Buffer) {
	t.Helper()
	var env []string
	if token != "" {
		tf := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tf, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env = append(env, "INBOXD_UI_TOKEN_FILE="+tf)
	}
	return consoleDaemonWith(t, "default: ignore\n", env, seed)
}

// consoleDaemonWith runs `inboxd run` with the routes file routes and the
// settings env, the database seeded with seed, the console (and /metrics)
// on a mux served by a test server; it returns the server's URL, the
// database and the logs. It stops when t ends.
func consoleDaemonWith(t *testing.T, routesFile string, extra []string, seed string) (string, *pgtest.DB, *syncbuf.Buffer) {
	t.Helper()
	db := pgtest.New(t)
	if seed != "" {
		if _, err := db.Pool.Exec(context.Background(), seed); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	routes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte(routesFile), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append([]string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_ROUTES=" + routes, "INBOXD_POLL_INTERVAL=100ms"}, extra...)
	mux := http.NewServeMux()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logs := &syncbuf.Buffer{}
	go func() { done <- Main(ctx, []string{"run"}, env, &bytes.Buffer{}, logs, Options{Mux: mux}) }()
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
	})
	waitForLog(t, logs, `"message":"running"`)
	return srv.URL, db, logs
}

// The browser clicks through the console of `inboxd run`: the overview
// shows the database's numbers; an action without the credential and one
// without the CSRF token are refused; a dead row found by its event id is
// opened, requeued after the dry-run count, and processed by the workers.
func TestConsoleInTheBrowser(t *testing.T) {
	t.Parallel()
	const token = "browser-test-token-0123456789"
	url, db, logs := consoleDaemon(t, token, `
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error) VALUES
		  ('orders', 'evt-dead-1', 'order.created', 'dead', 5, 'HTTP 503 from orders'),
		  ('orders', 'evt-dead-2', 'order.created', 'dead', 5, 'HTTP 503 from orders'),
		  ('orders', 'evt-dead-3', 'order.paid', 'dead', 5, 'schema mismatch'),
		  ('orders', 'orders/0/17', 'unknown', 'rejected', 0, 'missing event_id'),
		  ('orders', 'orders/0/18', 'unknown', 'rejected', 0, 'missing event_type')`)
	ctx := browsertest.Start(t)
	ctx2 := context.Background()
	count := func(sql string) string {
		t.Helper()
		var n string
		if err := db.Pool.QueryRow(ctx2, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		// One evaluation in the page: a node looked up and then read in two
		// protocol calls can go in between (a page replaced).
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(function () { var e = document.querySelector(%q); return e ? e.innerText : "<no element>"; })()`, sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	eval := func(js string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err != nil {
			t.Fatalf("evaluate: %v", err)
		}
	}

	// Without the credential, the console shows the sign-in form and
	// nothing of the inbox.
	run("overview without sign-in", chromedp.Navigate(url+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	if got := text("#error"); !strings.Contains(got, "sign in") {
		t.Errorf("a page without the credential says %q", got)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#n-dead').length`)); err != nil || n != 0 {
		t.Errorf("a page without the credential shows the overview's numbers (%d, %v)", n, err)
	}

	// An action without the credential: refused (401), nothing changes.
	eval(`document.body.insertAdjacentHTML('beforeend',
		'<form id="forged" method="post" action="/ui/requeue"><input name="status" value="dead"><input name="type" value="order.created"><input name="confirm" value="yes"></form>');
		document.getElementById('forged').submit(); true`)
	run("forged action", chromedp.WaitVisible(chromedp.ID("error")))
	if got := text("#error"); !strings.Contains(got, "sign in") {
		t.Errorf("an action without the credential says %q", got)
	}

	// Sign in from a page asked for: the form returns to it.
	run("sign in", chromedp.Navigate(url+"/ui/rows?status=rejected"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("user"), "alice"), chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin")), chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/rows/4"], a[href="/ui/rows/5"]`)))
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || !strings.HasSuffix(loc, "/ui/rows?status=rejected") {
		t.Errorf("signed in at %q (%v), want back at the rejected rows", loc, err)
	}

	// The overview's numbers are the database's.
	run("overview", chromedp.Navigate(url+"/ui/"), chromedp.WaitVisible(chromedp.ID("n-dead")))
	for sel, sql := range map[string]string{
		"#n-dead":     "SELECT count(*) FROM inbox WHERE status = 'dead'",
		"#n-rejected": "SELECT count(*) FROM inbox WHERE status = 'rejected'",
	} {
		if got, want := text(sel), count(sql); got != want {
			t.Errorf("overview %s = %s, the database holds %s", sel, got, want)
		}
	}

	// Find the dead row by its event id: one match opens the row.
	run("search", chromedp.SendKeys(chromedp.CSS(`header input[name="event_id"]`), "evt-dead-2"),
		chromedp.Click(chromedp.ID("search-go")), chromedp.WaitVisible(chromedp.ID("col-event_id")))
	if got := text("#col-event_id"); got != "evt-dead-2" {
		t.Fatalf("the search opened the row of %q", got)
	}
	rowURL, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}

	// The requeue form without its CSRF token: refused (403).
	eval(`document.querySelector('#requeue-one').form.querySelector('[name="csrf"]').remove(); true`)
	run("requeue without CSRF", chromedp.Click(chromedp.ID("requeue-one")), chromedp.WaitVisible(chromedp.ID("error")))
	if got := text("#error"); !strings.Contains(got, "CSRF") {
		t.Errorf("an action without the CSRF token says %q", got)
	}
	if n := count("SELECT count(*) FROM inbox WHERE status = 'dead'"); n != "3" {
		t.Fatalf("refused actions changed rows: %s dead", n)
	}

	// Requeue it: the dry run counts 1, the confirmation requeues it.
	run("dry run", chromedp.Navigate(rowURL), chromedp.WaitVisible(chromedp.ID("requeue-one")),
		chromedp.Click(chromedp.ID("requeue-one")), chromedp.WaitVisible(chromedp.ID("confirm")))
	if got := text("#count"); got != "1" {
		t.Errorf("dry-run count %s, want 1", got)
	}
	if n := count("SELECT count(*) FROM inbox WHERE event_id = 'evt-dead-2' AND status = 'dead'"); n != "1" {
		t.Fatal("the dry run changed the row")
	}
	run("confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("back")))
	if got := text("#count"); got != "1" {
		t.Errorf("requeued %s, want 1", got)
	}
	testkit.WaitFor(t, 30*time.Second, "the requeued row processed", func() bool {
		return count("SELECT status FROM inbox WHERE event_id = 'evt-dead-2'") == "processed"
	})
	run("row processed", chromedp.Navigate(rowURL), chromedp.WaitVisible(chromedp.ID("col-status")))
	if got := text("#col-status"); got != "processed" {
		t.Errorf("the row's page says %q, want processed", got)
	}
	if l := logs.String(); !strings.Contains(l, `"action":"requeue"`) || !strings.Contains(l, `"user":"alice"`) || strings.Contains(l, token) {
		t.Errorf("the action's log line is missing or holds the token:\n%s", l)
	}

	// Sign out: the session ends, the next page asks for the token again.
	run("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("token")))
	run("after sign-out", chromedp.Navigate(rowURL), chromedp.WaitVisible(chromedp.ID("token")))
	if n := count("SELECT count(*) FROM console_sessions WHERE ended_at IS NOT NULL"); n != "1" {
		t.Errorf("%s sessions ended after the sign-out, want 1", n)
	}
}
