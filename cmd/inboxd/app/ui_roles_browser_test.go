package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/inboxd/inboxd/internal/console"
	"github.com/inboxd/inboxd/internal/console/browsertest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// screenshotsEnv names the directory TestConsoleEndToEnd writes its PNGs
// to (`make screenshots` sets it to docs/images); without it they go to a
// temporary directory.
const screenshotsEnv = "INBOXD_SCREENSHOTS"

// browser is a chromium driving one console, with the test's helpers.
type browser struct {
	t   *testing.T
	ctx context.Context
	url string
	dir string // where the screenshots go
}

// do runs steps, failing the test with what.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// text returns the trimmed text of the element sel, read in one
// evaluation in the page (the auto-refresh may replace the element between
// two protocol calls).
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf(`(function () { var e = document.querySelector(%q); return e ? e.innerText : "<no element>"; })()`, sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// count returns how many elements sel matches.
func (b *browser) count(sel string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
	if err != nil {
		b.t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

// eval evaluates js, which returns true.
func (b *browser) eval(js string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](js)); err != nil {
		b.t.Fatalf("evaluate: %v", err)
	}
}

// shot writes the page's screenshot as console-name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("%s: screenshot: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "console-"+name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// signIn signs in with token and waits for the overview.
func (b *browser) signIn(token string) {
	b.t.Helper()
	b.do("sign in", chromedp.Navigate(b.url+"/ui/signin"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("signin")), chromedp.WaitVisible(chromedp.ID("n-dead")))
}

// signOut signs out and waits for the sign-in form.
func (b *browser) signOut() {
	b.t.Helper()
	b.do("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("token")))
}

// forge submits a form built in the page: a POST to action with the
// fields and the page's own CSRF token (the sign-out form's), as a
// signed-in operator's browser would, whatever the page offers.
func (b *browser) forge(action string, fields map[string]string) {
	b.t.Helper()
	var inputs strings.Builder
	for k, v := range fields {
		fmt.Fprintf(&inputs, `<input name=%q value=%q>`, k, v)
	}
	b.eval(fmt.Sprintf(`(function () {
		var f = document.createElement('form'); f.method = 'post'; f.action = %q; f.innerHTML = %q;
		var c = document.querySelector('input[name="csrf"]'); if (c) { f.appendChild(c.cloneNode()); }
		document.body.appendChild(f); f.submit(); return true; })()`, action, inputs.String()))
	b.do("forged "+action, chromedp.WaitVisible(chromedp.CSS("h1")))
}

// metric returns the value of the gauge name in the daemon's /metrics.
func metric(t *testing.T, base, name string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(string(body))
	if m == nil {
		return ""
	}
	return m[1]
}

// The console of `inboxd run` end to end in chromium, as three named
// operators of a users file see it: a viewer reads every page and is
// refused every action (no button offered; a forged form 403); an
// operator requeues a dead row after the dry run (the workers process
// it), is refused a bulk action over INBOXD_UI_BULK_ADMIN_OVER, pauses and
// resumes a route under their name; an admin runs the bulk action, sets
// and clears a route's rate and resets an open breaker (the viewer and the
// operator are refused both); the audit page lists them. The
// blocked keys page lists the keys inboxd_ordered_blocked_keys counts. The
// overview refreshes itself (a row dying shows up without a reload),
// follows the system's dark mode, and works with scripts off. The
// screenshots of docs/console.md are taken on the way.
func TestConsoleEndToEnd(t *testing.T) {
	t.Parallel()
	const alice, bob, vic = "alice-admin-token-0123456789", "bob-operator-token-0123456789", "vic-viewer-token-0123456789"
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	if err := os.WriteFile(users, []byte(fmt.Sprintf("# name role token\nalice admin %s\nbob operator %s\nvic viewer %s\n",
		console.HashToken(alice), console.HashToken(bob), console.HashToken(vic))), 0o600); err != nil {
		t.Fatal(err)
	}
	routes := `
routes:
  - type: order.created
    handler: ignore
    ordered: true
    on_dead: block
  - type: order.paid
    handler: ignore
  - type: payment.captured
    handler: ignore
    max_attempts: 25
  - type: payment.refunded
    handler: dead
    breaker: {failures: 2, cool_down: 1h}
default: ignore
`
	base, db, logs := consoleDaemonWith(t, routes, []string{"INBOXD_UI_USERS_FILE=" + users, "INBOXD_UI_BULK_ADMIN_OVER=2", "INBOXD_STATS_INTERVAL=1s", "INBOXD_UI_SHOW_PAYLOADS=true"}, `
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error, key, received_at, updated_at, payload, headers, kafka_topic, kafka_partition, kafka_offset)
		SELECT 'orders', 'ord-' || (1000 + g), 'order.created', 'dead', 8,
		       'handler http: POST http://orders.internal/hooks/inbox: 503 Service Unavailable', convert_to('customer-' || g, 'UTF8'),
		       now() - ((g * 370) || ' seconds')::interval, now() - ((g * 37) || ' seconds')::interval,
		       convert_to('{"order_id": ' || (1000 + g) || ', "total": "42.50", "currency": "EUR"}', 'UTF8'),
		       jsonb_build_object('event_id', 'ord-' || (1000 + g), 'traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'authorization', 'Bearer sk_live_51H'),
		       'orders', g % 3, 81234 + g
		FROM generate_series(1, 2) AS g;
		INSERT INTO inbox (source, event_id, event_type, key, received_at)
		SELECT 'orders', 'wait-' || g, 'order.created', convert_to('customer-1', 'UTF8'), now() - interval '19 minutes'
		FROM generate_series(1, 3) AS g;
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error, key, updated_at)
		SELECT 'payments', 'pay-' || g, 'order.paid', 'dead', 1, 'permanent: unknown currency "XTS"', convert_to('customer-9', 'UTF8'), now() - ((g * 90) || ' seconds')::interval
		FROM generate_series(1, 3) AS g;
		INSERT INTO inbox (source, event_id, event_type, status, last_error)
		VALUES ('orders', 'orders/1/90211', 'unknown', 'rejected', 'no event id: neither header event_id nor ce_id');
		INSERT INTO inbox (source, event_id, event_type, status, processed_at, received_at)
		SELECT 'orders', 'p-' || g, 'order.paid', 'processed', now() - ((g % 3600) || ' seconds')::interval, now() - ((g % 3600) || ' seconds')::interval
		FROM generate_series(1, 3000) AS g WHERE (g % 3600) / 60 % 7 <> 3 OR g % 5 = 0;
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error, available_at, received_at, headers)
		SELECT 'payments', 'cap-' || g, 'payment.captured', 'received', 5 + g, 'handler http: POST http://payments.internal/capture: 503 Service Unavailable',
		       now() + ((g * 7) || ' minutes')::interval, now() - interval '40 minutes', '{"content-type":"application/json"}'
		FROM generate_series(1, 4) AS g;
		INSERT INTO inbox_attempts (row_id, attempt, started_at, finished_at, worker, outcome, error)
		SELECT i.id, a, now() - ((40 - a * 5) || ' minutes')::interval, now() - ((40 - a * 5) || ' minutes')::interval + ((120 + a * 40) || ' milliseconds')::interval,
		       'vm-replica-1/w' || (a % 3), 'retried', 'handler http: POST http://payments.internal/capture: 503 Service Unavailable'
		FROM inbox i, generate_series(1, 6) AS a WHERE i.event_id = 'cap-1';
		INSERT INTO inbox (source, event_id, event_type)
		SELECT 'payments', 'ref-' || g, 'payment.refunded' FROM generate_series(1, 3) AS g`)
	shots := os.Getenv(screenshotsEnv)
	if shots == "" {
		shots = t.TempDir()
	}
	b := &browser{t: t, ctx: browsertest.Start(t), url: base, dir: shots}
	ctx := context.Background()
	sql := func(q string) string {
		t.Helper()
		var s string
		if err := db.Pool.QueryRow(ctx, q).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	id := func(eventID string) string {
		return sql(`SELECT id::text FROM inbox WHERE event_id = '` + eventID + `'`)
	}

	// No credential: the sign-in form, which asks no name (the token names
	// its operator).
	b.do("sign-in form", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	if n := b.count("#user"); n != 0 {
		t.Errorf("the sign-in form of a users file asks for a name")
	}
	b.shot("signin")

	// The viewer reads every page and is offered no action.
	b.signIn(vic)
	if who, role := b.text("#who"), b.text("#role"); who != "vic" || role != "viewer" {
		t.Errorf("signed in as %q %q, want vic viewer", who, role)
	}
	for _, p := range []string{"/ui/", "/ui/rows?status=dead", "/ui/rows/" + id("ord-1001"), "/ui/blocked"} {
		b.do("viewer reads "+p, chromedp.Navigate(base+p), chromedp.WaitVisible(chromedp.CSS("h1")))
		if n := b.count(`main form[method="post"]`); n != 0 {
			t.Errorf("the viewer is offered %d action forms on %s", n, p)
		}
	}
	b.forge("/ui/requeue", map[string]string{"status": "dead", "id": id("ord-1001"), "confirm": "yes"})
	if got := b.text("#error"); !strings.Contains(got, "vic is a viewer: this action needs an operator") {
		t.Errorf("the viewer's forged requeue says %q", got)
	}
	b.shot("refused")
	b.do("back", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("n-dead")))
	b.forge("/ui/routes/pause", map[string]string{"route": "order.created", "reason": "x"})
	if sql(`SELECT count(*)::text FROM route_controls WHERE paused`) != "0" || sql(`SELECT status FROM inbox WHERE event_id = 'ord-1001'`) != "dead" {
		t.Fatal("the viewer's forged actions changed something")
	}
	// The admin's actions: refused to a viewer and, below, to an operator.
	adminRefused := func(who string) {
		t.Helper()
		for path, fields := range map[string]map[string]string{
			"/ui/routes/rate":          {"route": "order.created", "rate": "1"},
			"/ui/routes/reset-breaker": {"route": "payment.refunded"},
		} {
			b.do("back", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("n-dead")))
			if n := b.count(`#rate-form, button.clear-rate, button.reset-breaker`); n != 0 {
				t.Errorf("%s is offered %d rate or breaker forms", who, n)
			}
			b.forge(path, fields)
			if got := b.text("#error"); !strings.Contains(got, "this action needs an admin") {
				t.Errorf("%s's forged %s says %q", who, path, got)
			}
		}
		if got := sql(`SELECT count(*)::text FROM route_controls WHERE rate IS NOT NULL OR breaker_reset_at IS NOT NULL`); got != "0" {
			t.Fatalf("%s's forged rate or breaker reset changed %s routes", who, got)
		}
	}
	adminRefused("the viewer")
	b.signOut()

	// The operator: the blocked keys are the gauge's.
	b.signIn(bob)
	testkit.WaitFor(t, 30*time.Second, "inboxd_ordered_blocked_keys counted", func() bool { return metric(t, base, "inboxd_ordered_blocked_keys") == "2" })
	b.do("blocked keys", chromedp.Navigate(base+"/ui/blocked"), chromedp.WaitVisible(chromedp.ID("blocked")))
	if n := b.count("tr.blocked-key"); fmt.Sprint(n) != metric(t, base, "inboxd_ordered_blocked_keys") {
		t.Errorf("the blocked keys page lists %d keys, inboxd_ordered_blocked_keys says %s", n, metric(t, base, "inboxd_ordered_blocked_keys"))
	}
	b.shot("blocked")

	// The dead list, filtered; one row; its requeue after the dry run.
	b.do("dead rows", chromedp.Navigate(base+"/ui/rows?status=dead&error=503"), chromedp.WaitVisible(chromedp.ID("rows")))
	b.shot("dead")
	b.do("row", chromedp.Navigate(base+"/ui/rows/"+id("ord-1001")), chromedp.WaitVisible(chromedp.ID("fields")))
	if got := b.text("#col-headers"); strings.Contains(got, "sk_live") || !strings.Contains(got, "traceparent") {
		t.Errorf("the row's headers: %s", got)
	}
	if n := b.count("#col-started, #col-runs_ordered, #col-claim_pos"); n != 0 {
		t.Errorf("the row page shows the engine's bookkeeping")
	}
	b.do("payload", chromedp.Click(chromedp.CSS("#payload summary")), chromedp.WaitVisible(chromedp.ID("col-payload")))
	b.shot("row")
	b.do("dry run", chromedp.Click(chromedp.ID("requeue-one")), chromedp.WaitVisible(chromedp.ID("confirm")))
	if got := b.text("#count"); got != "1" {
		t.Errorf("dry-run count %s, want 1", got)
	}
	b.shot("dry-run")
	b.do("requeue", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("back")))
	testkit.WaitFor(t, 30*time.Second, "the requeued head and the rows of its key processed", func() bool {
		return sql(`SELECT count(*)::text FROM inbox WHERE key = 'customer-1' AND status = 'processed'`) == "4"
	})

	// The retrying rows: one's timeline, retried now from its page; another
	// cancelled, ticked in the list, with a reason.
	b.do("retrying", chromedp.Navigate(base+"/ui/rows?view=retrying"), chromedp.WaitVisible(chromedp.ID("rows")))
	if got := b.text(`#rows tr:nth-child(2) td:nth-child(7)`); got != "6 of 25" {
		t.Errorf("the first retrying row's attempts: %q, want 6 of 25", got)
	}
	b.shot("retrying")
	b.do("timeline", chromedp.Navigate(base+"/ui/rows/"+id("cap-1")), chromedp.WaitVisible(chromedp.ID("timeline")))
	if n := b.count("#timeline tr.attempt"); n != 6 {
		t.Errorf("the timeline shows %d attempts, want 6", n)
	}
	b.shot("timeline")
	b.do("retry now", chromedp.Click(chromedp.ID("retry-one")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("back")))
	testkit.WaitFor(t, 30*time.Second, "the row retried now processed", func() bool {
		return sql(`SELECT status FROM inbox WHERE event_id = 'cap-1'`) == "processed"
	})
	b.do("cancel ticked", chromedp.Navigate(base+"/ui/rows?view=retrying"), chromedp.WaitVisible(chromedp.ID("rows")),
		chromedp.Click(chromedp.CSS(`#rows input[value="`+id("cap-2")+`"]`)), chromedp.SendKeys(chromedp.ID("reason"), "duplicate capture"),
		chromedp.Click(chromedp.ID("cancel-ticked")), chromedp.WaitVisible(chromedp.ID("confirm")))
	if got := b.text("#count"); got != "1" {
		t.Errorf("the cancel's dry run counts %s, want 1", got)
	}
	b.do("cancel confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("back")))
	if got := sql(`SELECT status || ': ' || last_error FROM inbox WHERE event_id = 'cap-2'`); got != "dead: cancelled by bob: duplicate capture" {
		t.Errorf("the cancelled row: %s", got)
	}

	// Over the bulk bound (3 dead order.paid rows, bound 2): an admin's.
	b.do("bulk", chromedp.Navigate(base+"/ui/rows?status=dead&type=order.paid"), chromedp.WaitVisible(chromedp.ID("requeue-set")),
		chromedp.Click(chromedp.ID("requeue-set")), chromedp.WaitVisible(chromedp.ID("error")))
	if got := b.text("#error"); !strings.Contains(got, "bob would requeue 3 rows: over 2 rows needs an admin") {
		t.Errorf("the operator's bulk requeue over the bound says %q", got)
	}

	// Pause and resume a route, under the operator's name.
	b.do("pause", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("n-dead")),
		chromedp.SendKeys(chromedp.CSS(`form.inline input[name="route"]`), "order.paid"),
		chromedp.SendKeys(chromedp.CSS(`form.inline input[name="reason"]`), "payments provider maintenance"),
		chromedp.Click(chromedp.CSS(`form.inline button`)), chromedp.WaitVisible(chromedp.CSS(`#paused td:not(.note)`)))
	if got := sql(`SELECT paused_by FROM route_controls WHERE route = 'order.paid' AND paused`); got != "bob" {
		t.Errorf("paused by %q", got)
	}
	b.shot("overview")
	b.do("resume", chromedp.Click(chromedp.CSS(`#paused button`)), chromedp.WaitVisible(chromedp.CSS(`#paused td.note`)))
	if got := sql(`SELECT count(*)::text FROM route_controls WHERE paused`); got != "0" {
		t.Errorf("%s routes paused after the resume", got)
	}
	adminRefused("the operator")
	b.signOut()

	// The admin runs the bulk action.
	b.signIn(alice)
	b.do("admin bulk", chromedp.Navigate(base+"/ui/rows?status=dead&type=order.paid"), chromedp.WaitVisible(chromedp.ID("requeue-set")),
		chromedp.Click(chromedp.ID("requeue-set")), chromedp.WaitVisible(chromedp.ID("confirm")))
	if got := b.text("#count"); got != "3" {
		t.Errorf("the admin's dry run counts %s, want 3", got)
	}
	b.do("admin bulk confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("back")))
	testkit.WaitFor(t, 30*time.Second, "the bulk requeue processed", func() bool {
		return sql(`SELECT count(*)::text FROM inbox WHERE event_type = 'order.paid' AND status = 'dead'`) == "0"
	})

	// The admin's rate override, set and cleared, and a breaker reset: the
	// refunds route's breaker opened on its two dead rows (the third waits).
	refunds := `#limits tr[data-route="payment.refunded"] .breaker-state`
	created := `#limits tr[data-route="order.created"]`
	testkit.WaitFor(t, 30*time.Second, "the refunds route's breaker open on the overview", func() bool {
		b.do("overview", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("limits")))
		return b.text(refunds) == "open"
	})
	b.do("set a rate", chromedp.SendKeys(chromedp.CSS(`#rate-form input[name="route"]`), "order.created"),
		chromedp.SendKeys(chromedp.CSS(`#rate-form input[name="rate"]`), "50"),
		chromedp.SendKeys(chromedp.CSS(`#rate-form input[name="burst"]`), "10"),
		chromedp.Click(chromedp.CSS(`#rate-form button`)), chromedp.WaitVisible(chromedp.CSS(created+` button.clear-rate`)))
	if got := b.text(created + " .limit-now"); got != "50/s (burst 10)" {
		t.Errorf("order.created's limit on the overview: %q, want 50/s (burst 10)", got)
	}
	if got := sql(`SELECT rate || '/' || burst || ' by ' || rate_by FROM route_controls WHERE route = 'order.created'`); got != "50/10 by alice" {
		t.Errorf("the override stored: %q", got)
	}
	b.shot("limits")
	b.do("clear the rate", chromedp.Click(chromedp.CSS(created+` button.clear-rate`)), chromedp.WaitNotPresent(chromedp.CSS(created+` button.clear-rate`)),
		chromedp.WaitVisible(chromedp.ID("limits")))
	if got := b.text(created + " .limit-now"); got != "none" {
		t.Errorf("order.created's limit after the clear: %q, want none", got)
	}
	b.do("reset the breaker", chromedp.Click(chromedp.CSS(`#limits tr[data-route="payment.refunded"] button.reset-breaker`)))
	testkit.WaitFor(t, 30*time.Second, "the refunds route's breaker closed by the reset", func() bool {
		return metric(t, base, `inboxd_route_breaker_state{route="payment.refunded"}`) == "0"
	})
	testkit.WaitFor(t, 30*time.Second, "the refund that waited behind the open breaker attempted", func() bool {
		return sql(`SELECT count(*)::text FROM inbox WHERE event_type = 'payment.refunded' AND status = 'dead'`) == "3"
	})
	b.do("overview", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("limits")))
	if got := b.text(refunds); got != "closed" {
		t.Errorf("the refunds route's breaker after the reset: %q, want closed", got)
	}

	// The overview refreshes itself: a row that dies shows up without a
	// reload.
	b.do("overview", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("n-dead")))
	before := b.text("#n-dead")
	if _, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, status, last_error) VALUES ('orders', 'late-1', 'order.x', 'dead', 'boom')`); err != nil {
		t.Fatal(err)
	}
	want := sql(`SELECT count(*)::text FROM inbox WHERE status = 'dead'`)
	testkit.WaitFor(t, 30*time.Second, "the overview's dead count refreshed", func() bool { return b.text("#n-dead") == want })
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`performance.getEntriesByType('navigation').length`)); err != nil || n != 1 {
		t.Errorf("the page was navigated again (%d, %v), not refreshed in place", n, err)
	}
	if before == want {
		t.Errorf("the dead count was %s before the row died", before)
	}

	// The throughput of the routes, from the rollup the daemon writes.
	testkit.WaitFor(t, 90*time.Second, "the rollup has the processed rows", func() bool {
		return sql(`SELECT coalesce(sum(processed), 0)::text FROM route_rollup WHERE route = 'order.paid'`) != "0"
	})
	b.do("throughput", chromedp.Navigate(base+"/ui/throughput"), chromedp.WaitVisible(chromedp.ID("series")))
	if n := b.count(`#route-order\.paid rect.processed`); n == 0 {
		t.Errorf("no processed bar for order.paid")
	}
	b.shot("throughput")
	b.do("audit", chromedp.Navigate(base+"/ui/audit"), chromedp.WaitVisible(chromedp.ID("audit")))
	if got := b.text("#audit"); !strings.Contains(got, "rate_change") || !strings.Contains(got, "breaker_reset") || !strings.Contains(got, "route order.created: rate 50/s (burst 10)") {
		t.Errorf("the audit page lacks the rate change or the breaker reset:\n%s", got)
	}
	b.shot("audit")
	b.do("overview", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("n-dead")))

	// Dark mode, as the system says.
	if _, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
		t.Fatal(err)
	}
	bg, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
	if err != nil || bg != "rgb(20, 24, 29)" {
		t.Errorf("the dark page's background is %q (%v)", bg, err)
	}
	b.shot("overview-dark")
	if _, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{}); err != nil {
		t.Fatal(err)
	}

	// Scripts off: the pages are the same, without the refresh.
	if _, err := chromedp.Call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	b.do("scripts off", chromedp.Navigate(base+"/ui/rows?status=dead"), chromedp.WaitVisible(chromedp.ID("rows")))
	if n := b.count("#rows a"); n == 0 {
		t.Errorf("with scripts off the dead list is empty")
	}
	if vis, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('label.refresh').hidden`)); err != nil || !vis {
		t.Errorf("with scripts off the auto-refresh switch shows (%v)", err)
	}
	if _, err := chromedp.Call(b.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false}); err != nil {
		t.Fatal(err)
	}
	b.signOut()

	l := logs.String()
	for _, tok := range []string{alice, bob, vic, "sk_live"} {
		if strings.Contains(l, tok) {
			t.Errorf("the log holds %q", tok)
		}
	}
	// Who did what: the audit trail (dry runs and refusals apart).
	if got := sql(`SELECT string_agg(operator || ' ' || action || ' ' || row_count, ', ' ORDER BY id) FROM ops_audit WHERE NOT dry_run AND action IN ('requeue', 'retry_now', 'cancel', 'pause', 'resume', 'rate_change', 'breaker_reset')`); got != "bob requeue 1, bob retry_now 1, bob cancel 1, bob pause 0, bob resume 1, alice requeue 3, alice rate_change 1, alice rate_change 1, alice breaker_reset 1" {
		t.Errorf("the audit trail's actions: %s", got)
	}
	if !strings.Contains(l, `console action refused: role`) {
		t.Errorf("the log lacks the refused action")
	}
}
