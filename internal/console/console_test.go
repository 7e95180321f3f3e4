package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/ops"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
)

const testToken = "s3cret-token-for-tests"

// bundle is a console on its own database.
type bundle struct {
	db  *pgtest.DB
	srv *httptest.Server
	log *syncbuf.Buffer
}

// setup starts a console on a fresh database; token "" is read-only.
func setup(t *testing.T, token string, mutate ...func(*Config)) *bundle {
	t.Helper()
	db := pgtest.New(t)
	logs := &syncbuf.Buffer{}
	cfg := Config{DB: db.Pool, Token: token, StaleAfter: 0, Logger: zerolog.New(logs)}
	for _, m := range mutate {
		m(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &bundle{db: db, srv: srv, log: logs}
}

// exec runs sql on the bundle's database.
func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// seed inserts n dead rows of type typ from source src, last error err.
func (b *bundle) seed(t *testing.T, st string, n int, typ, src, lastErr string) {
	t.Helper()
	b.exec(t, `INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error, payload)
		SELECT $1, $2 || '-' || $3 || '-' || md5($4) || '-' || g, $2, $3, 5, $4, convert_to('{"card":"4111-secret"}', 'UTF8') FROM generate_series(1, $5) AS g`,
		src, typ, st, lastErr, n)
}

// get fetches path with the client c (nil: a plain one) and returns the
// status code and body.
func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// post posts form to u with c, with an optional bearer token.
func post(t *testing.T, c *http.Client, u string, form url.Values, bearer string) (int, string) {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// idText returns the text of the element with id in body (a number or a
// short text), or fails.
func idText(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `">([^<]*)<`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no element %q in the page:\n%s", id, body)
	}
	return m[1]
}

// signedIn returns a client with a cookie session and the CSRF token of
// its forms.
func signedIn(t *testing.T, b *bundle) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	code, _ := post(t, c, b.srv.URL+"/ui/signin", url.Values{"user": {"alice"}, "token": {testToken}}, "")
	if code != http.StatusOK {
		t.Fatalf("sign in: %d", code)
	}
	_, body := get(t, c, b.srv.URL+"/ui/rows?status=dead")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("signed in, but no CSRF token in the page:\n%s", body)
	}
	return c, m[1]
}

func TestOverviewShowsTheDatabasesNumbers(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.seed(t, "dead", 3, "order.created", "orders", "boom")
	b.seed(t, "rejected", 2, "bad", "orders", "missing event_id")
	b.seed(t, "received", 4, "order.paid", "orders", "")
	b.exec(t, `UPDATE inbox SET received_at = now() - interval '2 hours' WHERE event_type = 'order.paid'`)
	b.exec(t, `INSERT INTO inbox (source, event_id, event_type, status, processed_at)
		SELECT 'orders', 'p-' || g, 'order.paid', 'processed', now() FROM generate_series(1, 7) AS g`)
	code, body := get(t, nil, b.srv.URL+"/ui/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	for id, want := range map[string]string{"n-dead": "3", "n-rejected": "2", "n-received": "4", "n-stale": "4",
		"n-processed-hour": "7", "n-dead-hour": "3", "n-outbox": "0"} {
		if got := idText(t, body, id); got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
	if !strings.Contains(body, "<svg") {
		t.Error("no chart")
	}
}

func TestRowsFilterAndKeysetPaging(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.seed(t, "dead", 120, "order.created", "orders", "HTTP 503 from orders")
	b.seed(t, "dead", 5, "user.signed", "users", "timeout")
	b.seed(t, "rejected", 1, "x", "orders", "missing event_id")
	idsOf := func(body string) []string {
		var ids []string
		for _, m := range regexp.MustCompile(`<td class="num"><a href="/ui/rows/(\d+)">`).FindAllStringSubmatch(body, -1) {
			ids = append(ids, m[1])
		}
		return ids
	}
	_, body := get(t, nil, b.srv.URL+"/ui/rows?status=dead&error=503")
	first := idsOf(body)
	if len(first) != pageSize {
		t.Fatalf("first page: %d rows, want %d", len(first), pageSize)
	}
	seen := map[string]bool{}
	pages, total := 0, 0
	next := "/ui/rows?status=dead&error=503"
	for next != "" {
		_, body := get(t, nil, b.srv.URL+next)
		for _, id := range idsOf(body) {
			if seen[id] {
				t.Fatalf("row %s on two pages", id)
			}
			seen[id] = true
			total++
		}
		pages++
		m := regexp.MustCompile(`href="([^"]+)" id="next"`).FindStringSubmatch(body)
		next = ""
		if m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if total != 120 || pages != 3 {
		t.Errorf("paged %d rows in %d pages, want 120 in 3", total, pages)
	}
	_, body = get(t, nil, b.srv.URL+"/ui/rows?status=dead&type=user.signed&source=users&since=1h")
	if n := len(idsOf(body)); n != 5 {
		t.Errorf("type+source+since filter: %d rows, want 5", n)
	}
	_, body = get(t, nil, b.srv.URL+"/ui/rows?status=rejected")
	if n := len(idsOf(body)); n != 1 {
		t.Errorf("rejected: %d rows, want 1", n)
	}
	if code, _ := get(t, nil, b.srv.URL+"/ui/rows?view=nonsense"); code != http.StatusBadRequest {
		t.Errorf("view=nonsense: %d, want 400", code)
	}
}

func TestReadOnlyWithoutToken(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.seed(t, "dead", 1, "t", "s", "boom")
	_, body := get(t, nil, b.srv.URL+"/ui/rows?status=dead")
	if strings.Contains(body, `action="/ui/requeue"`) || strings.Contains(body, `action="/ui/discard"`) {
		t.Error("a read-only console shows action forms")
	}
	for _, p := range []string{"/ui/requeue", "/ui/discard", "/ui/routes/pause", "/ui/routes/resume", "/ui/signin"} {
		if code, _ := post(t, nil, b.srv.URL+p, url.Values{"id": {"1"}, "route": {"t"}, "confirm": {"yes"}}, "anything"); code != http.StatusForbidden {
			t.Errorf("POST %s on a read-only console: %d, want 403", p, code)
		}
	}
	var n int
	_ = b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM inbox WHERE status = 'dead'").Scan(&n)
	if n != 1 {
		t.Errorf("dead rows = %d after refused actions, want 1", n)
	}
}

func TestActionsNeedTheCredentialAndTheCSRFToken(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.seed(t, "dead", 2, "t", "s", "boom")
	form := url.Values{"status": {"dead"}, "type": {"t"}, "confirm": {"yes"}}
	if code, _ := post(t, nil, b.srv.URL+"/ui/requeue", form, ""); code != http.StatusUnauthorized {
		t.Errorf("no credential: %d, want 401", code)
	}
	if code, _ := post(t, nil, b.srv.URL+"/ui/requeue", form, "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong bearer token: %d, want 401", code)
	}
	c, csrf := signedIn(t, b)
	if code, _ := post(t, c, b.srv.URL+"/ui/requeue", form, ""); code != http.StatusForbidden {
		t.Errorf("cookie session without CSRF token: %d, want 403", code)
	}
	wrong := "0"
	if csrf[0] == '0' {
		wrong = "1"
	}
	bad := url.Values{"csrf": {wrong + csrf[1:]}}
	for k, v := range form {
		bad[k] = v
	}
	if code, _ := post(t, c, b.srv.URL+"/ui/requeue", bad, ""); code != http.StatusForbidden {
		t.Errorf("cookie session with a wrong CSRF token: %d, want 403", code)
	}
	var n int
	_ = b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM inbox WHERE status = 'dead'").Scan(&n)
	if n != 2 {
		t.Fatalf("dead rows = %d after refused actions, want 2", n)
	}
	if strings.Contains(b.log.String(), testToken) {
		t.Error("the log holds the token")
	}
	// A forged cookie is no session.
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(b.srv.URL + "/ui/")
	jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: "YWxpY2U.9999999999.00.deadbeef", Path: "/ui/"}})
	if code, _ := post(t, &http.Client{Jar: jar}, b.srv.URL+"/ui/requeue", form, ""); code != http.StatusUnauthorized {
		t.Errorf("forged cookie: %d, want 401", code)
	}
	// The bearer token alone works (no CSRF: a browser never sends it by itself).
	code, body := post(t, nil, b.srv.URL+"/ui/requeue", form, testToken)
	if code != http.StatusOK || idText(t, body, "count") != "2" {
		t.Errorf("bearer requeue: %d, count %q", code, body)
	}
}

func TestDryRunCountThenAction(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.seed(t, "dead", 2500, "order.created", "orders", "HTTP 503")
	b.seed(t, "dead", 3, "order.created", "orders", "schema mismatch")
	c, csrf := signedIn(t, b)
	form := url.Values{"csrf": {csrf}, "status": {"dead"}, "type": {"order.created"}, "error": {"503"}}
	code, body := post(t, c, b.srv.URL+"/ui/requeue", form, "")
	if code != http.StatusOK {
		t.Fatalf("dry run: %d\n%s", code, body)
	}
	if got := idText(t, body, "count"); got != "2500" {
		t.Fatalf("dry run count %s, want 2500", got)
	}
	var dead int
	_ = b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM inbox WHERE status = 'dead'").Scan(&dead)
	if dead != 2503 {
		t.Fatalf("the dry run changed rows: %d dead", dead)
	}
	if !strings.Contains(body, `name="confirm" value="yes"`) {
		t.Fatal("no confirm form")
	}
	form.Set("confirm", "yes")
	code, body = post(t, c, b.srv.URL+"/ui/requeue", form, "")
	if code != http.StatusOK || idText(t, body, "count") != "2500" {
		t.Fatalf("requeue: %d\n%s", code, body)
	}
	var received int
	_ = b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FILTER (WHERE status = 'received'), count(*) FILTER (WHERE status = 'dead') FROM inbox").Scan(&received, &dead)
	if received != 2500 || dead != 3 {
		t.Errorf("after requeue: %d received, %d dead; want 2500, 3", received, dead)
	}
	logs := b.log.String()
	if !strings.Contains(logs, `"operator":"alice"`) || !strings.Contains(logs, `"rows":2500`) || !strings.Contains(logs, `"action":"requeue"`) {
		t.Errorf("the action's log line lacks who/what/how many:\n%s", logs)
	}
	if strings.Contains(logs, "4111-secret") || strings.Contains(logs, testToken) {
		t.Error("the log holds a payload or the token")
	}
	// Discard one row: dry run, then confirm.
	var id int64
	_ = b.db.Pool.QueryRow(context.Background(), "SELECT id FROM inbox WHERE status = 'dead' LIMIT 1").Scan(&id)
	one := url.Values{"csrf": {csrf}, "status": {"dead"}, "id": {fmt.Sprint(id)}}
	if _, body := post(t, c, b.srv.URL+"/ui/discard", one, ""); idText(t, body, "count") != "1" {
		t.Fatalf("discard dry run:\n%s", body)
	}
	one.Set("confirm", "yes")
	if _, body := post(t, c, b.srv.URL+"/ui/discard", one, ""); idText(t, body, "count") != "1" {
		t.Fatalf("discard:\n%s", body)
	}
	if code, _ := get(t, c, fmt.Sprintf("%s/ui/rows/%d", b.srv.URL, id)); code != http.StatusNotFound {
		t.Errorf("discarded row still there: %d", code)
	}
}

func TestPayloadHiddenByDefault(t *testing.T) {
	t.Parallel()
	for _, show := range []bool{false, true} {
		b := setup(t, "", func(c *Config) { c.ShowPayloads = show })
		b.seed(t, "dead", 1, "t", "s", "boom")
		b.exec(t, `UPDATE inbox SET headers = '{"trace":"abc"}', kafka_topic = 's', kafka_partition = 3, kafka_offset = 42`)
		_, body := get(t, nil, b.srv.URL+"/ui/rows/1")
		if got := strings.Contains(body, "4111-secret"); got != show {
			t.Errorf("ShowPayloads=%v: payload shown = %v", show, got)
		}
		for _, want := range []string{"abc", "kafka_offset", "42", "boom"} {
			if !strings.Contains(body, want) {
				t.Errorf("row page lacks %q", want)
			}
		}
	}
}

func TestSearchByEventIDAcrossSourcesAndHeldRows(t *testing.T) {
	t.Parallel()
	b := setup(t, "", func(c *Config) { c.BlockingTypes = func() []string { return []string{"t"} } })
	b.exec(t, `INSERT INTO inbox (source, event_id, event_type, status, key, last_error) VALUES
		('a', 'e-1', 't', 'dead', 'k1', 'boom'), ('b', 'e-1', 't', 'received', NULL, NULL),
		('a', 'e-2', 't', 'received', 'k1', NULL), ('a', 'e-3', 't', 'received', 'k2', NULL)`)
	_, body := get(t, nil, b.srv.URL+"/ui/search?event_id=e-1")
	if n := strings.Count(body, `<td class="num"><a href="/ui/rows/`); n != 2 {
		t.Errorf("search e-1: %d rows, want 2 (one per source)", n)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(b.srv.URL + "/ui/search?event_id=e-3")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); loc != "/ui/rows/4" {
		t.Errorf("one match redirects to %q, want /ui/rows/4", loc)
	}
	_, body = get(t, nil, b.srv.URL+"/ui/rows/1")
	if !strings.Contains(body, `id="held"`) || !strings.Contains(body, "e-2") || strings.Contains(body, "e-3") {
		t.Errorf("the dead row's page does not list exactly the rows of its key:\n%s", body)
	}
	_, body = get(t, nil, b.srv.URL+"/ui/blocked")
	if !strings.Contains(body, "k1") || strings.Contains(body, "k2") {
		t.Errorf("blocked keys:\n%s", body)
	}
}

// The blocked keys page lists the keys the gauge inboxd_ordered_blocked_keys
// counts, no more: one entry per (source, key) of a dead row of a route
// that blocks (ordered, on_dead: block), its head the key's oldest dead
// row, with the rows waiting behind it; not the dead rows of an unordered
// route nor of an ordered route that skips its dead rows, not rows
// without a key, not RabbitMQ rows stored without a key header (their key
// is the routing key, the queue's name here, on an unordered route). The
// row page lists the rows a dead row holds back only where it holds them.
func TestBlockedKeysAreTheGaugesKeys(t *testing.T) {
	t.Parallel()
	blocking := []string{"order.created"}
	ordered := []string{"order.created", "order.paid"}
	b := setup(t, "", func(c *Config) {
		c.BlockingTypes = func() []string { return blocking }
		c.OrderedTypes = func() []string { return ordered }
	})
	b.exec(t, `INSERT INTO inbox (source, event_id, event_type, status, key, last_error) VALUES
		('orders', 'o-1', 'order.created', 'dead', 'cust-1', 'boom'),
		('orders', 'o-2', 'order.created', 'received', 'cust-1', NULL),
		('orders', 'o-3', 'order.created', 'dead', 'cust-1', 'boom'),
		('orders', 'o-4', 'order.created', 'received', 'cust-1', NULL),
		('orders', 'o-5', 'order.created', 'dead', 'cust-2', 'boom'),
		('billing', 'o-1', 'order.created', 'dead', 'cust-1', 'boom'),
		('billing', 'o-2', 'order.created', 'received', 'cust-1', NULL),
		('orders', 'p-1', 'order.paid', 'dead', 'cust-3', 'boom'),
		('orders', 'p-2', 'order.paid', 'received', 'cust-3', NULL),
		('orders', 'n-1', 'order.created', 'dead', NULL, 'boom'),
		('orders-q', 'r-1', 'order.shipped', 'dead', 'orders-q', 'boom'),
		('orders-q', 'r-2', 'order.shipped', 'dead', 'orders-q', 'boom'),
		('orders-q', 'r-3', 'order.shipped', 'received', 'orders-q', NULL)`)
	// Failing heads: f-1 (order.paid, ordered) holds f-2 back; p-3 fails
	// behind the dead p-1 (not a head); f-3 fails with nothing behind it;
	// u-1 fails on an unordered route.
	b.exec(t, `INSERT INTO inbox (source, event_id, event_type, status, key, attempts, last_error) VALUES
		('orders', 'f-1', 'order.paid', 'received', 'cust-4', 2, 'http 503'),
		('orders', 'f-2', 'order.paid', 'received', 'cust-4', 0, NULL),
		('orders', 'p-3', 'order.paid', 'received', 'cust-3', 1, 'http 503'),
		('orders', 'f-3', 'order.paid', 'received', 'cust-5', 1, 'http 503'),
		('orders', 'u-1', 'order.shipped', 'received', 'cust-6', 3, 'http 503'),
		('orders', 'u-2', 'order.shipped', 'received', 'cust-6', 0, NULL)`)
	gauge, err := driver.BlockedKeys(context.Background(), b.db.Pool, blocking)
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, nil, b.srv.URL+"/ui/blocked")
	entries := regexp.MustCompile(`<tr class="blocked-key"><td class="num"><a href="/ui/rows/(\d+)">\d+</a></td><td>([^<]*)</td><td>([^<]*)</td>.*?<td class="num">(\d+)</td></tr>`).FindAllStringSubmatch(body, -1)
	var got []string
	for _, e := range entries {
		got = append(got, fmt.Sprintf("head %s %s/%s behind %s", e[1], e[2], e[3], e[4]))
	}
	want := []string{"head 6 billing/cust-1 behind 1", "head 5 orders/cust-2 behind 0", "head 1 orders/cust-1 behind 3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("blocked keys %q, want %q", got, want)
	}
	if int64(len(got)) != gauge {
		t.Errorf("the page lists %d keys, inboxd_ordered_blocked_keys's query counts %d", len(got), gauge)
	}
	failing := regexp.MustCompile(`<tr class="failing-key"><td class="num"><a href="/ui/rows/\d+">(\d+)</a></td><td>([^<]*)</td><td>([^<]*)</td>.*?<td class="num">(\d+)</td></tr>`).FindAllStringSubmatch(body, -1)
	if len(failing) != 1 || failing[0][1] != "14" || failing[0][3] != "cust-4" || failing[0][4] != "1" {
		t.Errorf("failing heads %q, want row 14 (cust-4) with 1 behind", failing)
	}
	for id, held := range map[int]bool{1: true, 8: false, 11: false} {
		_, body := get(t, nil, fmt.Sprintf("%s/ui/rows/%d", b.srv.URL, id))
		if got := strings.Contains(body, `id="held"`); got != held {
			t.Errorf("row %d's page lists the rows its key holds back: %v, want %v", id, got, held)
		}
	}
	blocking = []string{}
	_, body = get(t, nil, b.srv.URL+"/ui/blocked")
	if strings.Contains(body, `class="blocked-key"`) || !strings.Contains(body, "no key is blocked") {
		t.Errorf("with no route blocking, the page lists keys:\n%s", body)
	}
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	resp, err := http.Get(b.srv.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "Cache-Control": "no-store"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("CSP %q", resp.Header.Get("Content-Security-Policy"))
	}
}

func TestPauseAndResumeARoute(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	c, csrf := signedIn(t, b)
	// A route the database does not know is refused (a typo, most likely).
	if code, _ := post(t, c, b.srv.URL+"/ui/routes/pause", url.Values{"csrf": {csrf}, "route": {"order.created"}}, ""); code != http.StatusBadRequest {
		t.Fatalf("pause of an unknown route: %d, want 400", code)
	}
	// Its rows had outcomes (the per-route rollup): a route the database knows.
	if _, err := b.db.Pool.Exec(context.Background(), `INSERT INTO route_rollup (span, at, route, dead, latency_buckets)
		VALUES (60, date_trunc('minute', now()), 'order.created', 1, '{0}')`); err != nil {
		t.Fatal(err)
	}
	if code, _ := post(t, c, b.srv.URL+"/ui/routes/pause", url.Values{"csrf": {csrf}, "route": {"order.created"}, "reason": {"orders down"}}, ""); code != http.StatusOK {
		t.Fatalf("pause: %d", code)
	}
	var by string
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT paused_by FROM route_controls WHERE route = 'order.created'").Scan(&by); err != nil || by != "alice" {
		t.Fatalf("paused by %q (%v), want alice", by, err)
	}
	_, body := get(t, c, b.srv.URL+"/ui/")
	if !strings.Contains(body, "orders down") {
		t.Error("the overview does not show the paused route")
	}
	if code, _ := post(t, nil, b.srv.URL+"/ui/routes/resume", url.Values{"route": {"order.created"}}, testToken); code != http.StatusOK {
		t.Fatalf("resume: %d", code)
	}
	var n int
	_ = b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM route_controls WHERE paused").Scan(&n)
	if n != 0 {
		t.Errorf("%d routes still paused", n)
	}
}

// A session ends when its time is up: the same cookie no longer
// authorises an action.
func TestSessionExpires(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Now().Unix())
	b := setup(t, testToken, func(c *Config) {
		c.SessionTTL = time.Hour
		c.Now = func() time.Time { return time.Unix(now.Load(), 0) }
	})
	b.seed(t, "dead", 1, "t", "s", "boom")
	c, csrf := signedIn(t, b)
	form := url.Values{"csrf": {csrf}, "status": {"dead"}, "type": {"t"}}
	if code, _ := post(t, c, b.srv.URL+"/ui/requeue", form, ""); code != http.StatusOK {
		t.Fatalf("dry run within the session: %d", code)
	}
	now.Add(3601)
	if code, _ := post(t, c, b.srv.URL+"/ui/requeue", form, ""); code != http.StatusUnauthorized {
		t.Errorf("dry run after the session ended: %d, want 401", code)
	}
}

// Rejected rows are requeued through Config.Remap, row by row: the dry
// run counts those that would map now and changes nothing; the action
// requeues them; without the hook the console refuses.
func TestRequeueRejectedRows(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken, func(c *Config) {
		c.Remap = func(r driver.RejectedRow) ops.Mapped {
			if strings.HasSuffix(r.EventID, "-1") { // maps nowhere: still rejected
				return ops.Mapped{Refused: true, Outcome: ops.OutcomeStillRejected, Line: "still rejected"}
			}
			return ops.Mapped{EventID: "remapped-" + r.EventID, EventType: "order.created"}
		}
	})
	b.seed(t, "rejected", 4, "unknown", "orders", "no event id")
	c, csrf := signedIn(t, b)
	form := url.Values{"csrf": {csrf}, "status": {"rejected"}}
	code, body := post(t, c, b.srv.URL+"/ui/requeue", form, "")
	if code != http.StatusOK || idText(t, body, "count") != "3" {
		t.Fatalf("dry run: %d, count %q, want 3\n%s", code, idText(t, body, "count"), body)
	}
	var still int
	_ = b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM inbox WHERE status = 'rejected'").Scan(&still)
	if still != 4 {
		t.Fatalf("the dry run left %d rows rejected, want 4", still)
	}
	form.Set("confirm", "yes")
	code, body = post(t, c, b.srv.URL+"/ui/requeue", form, "")
	if code != http.StatusOK || idText(t, body, "count") != "3" {
		t.Fatalf("requeue: %d\n%s", code, body)
	}
	var received, rejected int
	_ = b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FILTER (WHERE status = 'received'), count(*) FILTER (WHERE status = 'rejected') FROM inbox").Scan(&received, &rejected)
	if received != 3 || rejected != 1 {
		t.Errorf("after requeue: %d received, %d rejected; want 3, 1", received, rejected)
	}

	plain := setup(t, testToken)
	plain.seed(t, "rejected", 1, "unknown", "orders", "no event id")
	pc, pcsrf := signedIn(t, plain)
	if code, _ := post(t, pc, plain.srv.URL+"/ui/requeue", url.Values{"csrf": {pcsrf}, "status": {"rejected"}}, ""); code != http.StatusBadRequest {
		t.Errorf("requeue of rejected rows without the hook: %d, want 400", code)
	}
}

// The row page shows what an operator reads first, in order, and of the
// source's metadata only the source's own: a RabbitMQ row has no Kafka
// coordinates (NULL on it), a Kafka row has them; the engine's
// bookkeeping (started, runs_ordered, claim_pos, the lease's token) is not
// shown, the lease's holder only while a worker holds the row;
// credential-like header values are masked; the payload is behind a click.
func TestRowPageShowsTheSourcesOwnMetadata(t *testing.T) {
	t.Parallel()
	b := setup(t, "", func(c *Config) { c.ShowPayloads = true })
	b.exec(t, `INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error, headers, payload) VALUES
		('orders-q', 'r-1', 'order.created', 'dead', 3, 'http 503', '{"authorization":"Bearer abc.def","amqp-type":"order.created"}', 'hello'),
		('orders', 'k-1', 'order.created', 'dead', 3, 'http 503', '{"trace":"t-1"}', 'hello')`)
	b.exec(t, `UPDATE inbox SET kafka_topic = 'orders', kafka_partition = 2, kafka_offset = 77 WHERE event_id = 'k-1'`)
	_, rabbit := get(t, nil, b.srv.URL+"/ui/rows/1")
	_, kafka := get(t, nil, b.srv.URL+"/ui/rows/2")
	for _, hidden := range []string{`id="col-kafka_topic"`, `id="col-kafka_offset"`, `id="col-started"`, `id="col-runs_ordered"`, `id="col-claim_pos"`,
		`id="col-lease_token"`, `id="col-locked_by"`, "lease_token", "runs_ordered", "claim_pos", "abc.def", "From the source"} {
		if strings.Contains(rabbit, hidden) {
			t.Errorf("the RabbitMQ row's page shows %q", hidden)
		}
	}
	for _, shown := range []string{`id="col-status"`, `id="col-attempts">3<`, "http 503", "amqp-type", `<details id="payload"><summary>Payload (5 bytes)`, "hello"} {
		if !strings.Contains(rabbit, shown) {
			t.Errorf("the RabbitMQ row's page lacks %q", shown)
		}
	}
	if !strings.Contains(kafka, `id="col-kafka_offset">77<`) || !strings.Contains(kafka, `id="col-kafka_partition">2<`) {
		t.Errorf("the Kafka row's page lacks its coordinates:\n%s", kafka)
	}
	order := []string{`id="col-status"`, `id="col-event_type"`, `id="col-attempts"`, `id="col-last_error"`, `id="col-headers"`, `id="payload"`}
	at := -1
	for _, s := range order {
		i := strings.Index(rabbit, s)
		if i < at {
			t.Errorf("%s comes before what precedes it in %v", s, order)
		}
		at = i
	}
}

// Every view is listed with its own columns, and the actions on unfinished
// rows: a retrying row retried now and another cancelled from its list
// (ticked), with the operator's name and reason in its last error; the
// row page shows the attempts' timeline and offers retry now, cancel and
// discard on a retrying row, cancel on a processing one.
func TestViewsTimelineAndLiveActions(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.exec(t, `INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error, available_at, key) VALUES
		('orders', 'r-1', 'order.created', 'received', 6, 'http 503', now() + interval '1 hour', 'k1'),
		('orders', 'r-2', 'order.created', 'received', 2, 'http 503', now() + interval '2 hours', 'k2'),
		('orders', 'w-1', 'order.created', 'received', 0, NULL, now(), 'k3'),
		('orders', 'd-1', 'order.created', 'dead', 5, 'boom', now(), NULL)`)
	b.exec(t, `INSERT INTO inbox (source, event_id, event_type, status, processed_at, received_at) VALUES
		('orders', 'p-1', 'order.paid', 'processed', now(), now() - interval '1500 milliseconds')`)
	b.exec(t, `INSERT INTO inbox (source, event_id, event_type, status, lease_token, lease_expires_at, locked_by) VALUES
		('orders', 'h-1', 'order.paid', 'processing', 7, now() + interval '30 seconds', 'worker-7')`)
	ctx := context.Background()
	now := time.Now()
	if err := driver.RecordAttempts(ctx, b.db.Pool, "worker-3", []driver.Attempt{
		{RowID: 1, Attempt: 4, StartedAt: now.Add(-2 * time.Minute), FinishedAt: now.Add(-90 * time.Second), Outcome: "lease expired", Error: "rescued"},
		{RowID: 1, Attempt: 5, StartedAt: now.Add(-time.Minute), FinishedAt: now.Add(-time.Minute + 250*time.Millisecond), Outcome: "retried", Error: "http 503"},
		{RowID: 1, Attempt: 6, StartedAt: now.Add(-time.Second), FinishedAt: now, Outcome: "retried", Error: "http 503: upstream down"}}); err != nil {
		t.Fatal(err)
	}
	c, csrf := signedIn(t, b)
	for view, want := range map[string][]string{
		"retrying":   {"r-1", "r-2", "6", "next attempt"},
		"waiting":    {"w-1", "due "},
		"processing": {"h-1", "worker-7", "lease expires"},
		"processed":  {"p-1", "1.5s"},
		"dead":       {"d-1", "boom"},
	} {
		_, body := get(t, c, b.srv.URL+"/ui/rows?view="+view)
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("view %s lacks %q", view, w)
			}
		}
	}
	_, body := get(t, c, b.srv.URL+"/ui/rows/1")
	for _, want := range []string{`id="timeline"`, "worker-3", "http 503: upstream down", `id="retry-one"`, `id="cancel-one"`, `id="discard-one"`, "250ms",
		`<span class="badge lease-expired">lease expired</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the retrying row's page lacks %q", want)
		}
	}
	if _, body := get(t, c, b.srv.URL+"/ui/rows/6"); !strings.Contains(body, `id="cancel-one"`) || strings.Contains(body, `id="retry-one"`) {
		t.Errorf("the processing row's page does not offer cancel alone")
	}
	// Retry now r-1 from its page; cancel r-2, ticked in its list.
	if _, body := post(t, c, b.srv.URL+"/ui/retry", url.Values{"csrf": {csrf}, "status": {"received"}, "id": {"1"}, "confirm": {"yes"}}, ""); idText(t, body, "count") != "1" {
		t.Errorf("retry now:\n%s", body)
	}
	form := url.Values{"csrf": {csrf}, "view": {"retrying"}, "status": {"received"}, "scope": {"selection"}, "id": {"2"}, "reason": {"customer asked"}}
	if _, body := post(t, c, b.srv.URL+"/ui/cancel", form, ""); idText(t, body, "count") != "1" {
		t.Fatalf("cancel dry run:\n%s", body)
	}
	form.Set("confirm", "yes")
	if _, body := post(t, c, b.srv.URL+"/ui/cancel", form, ""); idText(t, body, "count") != "1" {
		t.Fatalf("cancel:\n%s", body)
	}
	var due bool
	var st, lastErr string
	if err := b.db.Pool.QueryRow(ctx, `SELECT available_at <= now() FROM inbox WHERE id = 1`).Scan(&due); err != nil || !due {
		t.Errorf("the retried row is not due now (%v)", err)
	}
	if err := b.db.Pool.QueryRow(ctx, `SELECT status, last_error FROM inbox WHERE id = 2`).Scan(&st, &lastErr); err != nil || st != "dead" || lastErr != "cancelled by alice: customer asked" {
		t.Errorf("the cancelled row: %s %q (%v)", st, lastErr, err)
	}
	var audit string
	if err := b.db.Pool.QueryRow(ctx, `SELECT string_agg(operator || ' ' || action || ' ' || row_count, ', ' ORDER BY id) FROM ops_audit WHERE NOT dry_run`).Scan(&audit); err != nil ||
		audit != "alice sign_in 0, alice retry_now 1, alice cancel 1" {
		t.Errorf("the audit trail: %q (%v)", audit, err)
	}
	if _, body := get(t, c, b.srv.URL+"/ui/audit"); !strings.Contains(body, "retry_now") || !strings.Contains(body, "customer asked") {
		t.Errorf("the audit page:\n%s", body)
	}
}

// The throughput page draws each route's rollup over the window: the
// totals, and the charts.
func TestThroughputFromTheRollup(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	at := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Minute)
	lat := make([]int64, 20)
	lat[3] = 40
	if err := driver.AddRollup(context.Background(), b.db.Pool, []driver.RollupCell{
		{Span: driver.SpanMinute, At: at, Route: "order.created", Processed: 40, Retried: 3, Dead: 1, Latency: lat},
		{Span: driver.SpanHour, At: at.Truncate(time.Hour), Route: "order.created", Processed: 40, Retried: 3, Dead: 1, Latency: lat}}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"hour", "day", "week"} {
		_, body := get(t, nil, b.srv.URL+"/ui/throughput?window="+w)
		for _, want := range []string{`id="route-order.created"`, `<span class="n-processed">40</span>`, `<span class="n-retried">3</span>`, `<span class="n-dead">1</span>`, `<rect class="processed"`, `<polyline class="p50"`} {
			if !strings.Contains(body, want) {
				t.Errorf("window %s lacks %s", w, want)
			}
		}
	}
	if code, _ := get(t, nil, b.srv.URL+"/ui/throughput?window=year"); code != http.StatusBadRequest {
		t.Errorf("window=year: %d", code)
	}
}

// Past driver.ExactCountLimit dead rows the overview shows their count as
// an estimate ("≈N", never below the limit), and without the error
// text's index (no pg_trgm) the rows page still finds rows by error text.
func TestOverviewEstimatesAndSearchWithoutIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.seed(t, "dead", driver.ExactCountLimit+500, "order.created", "orders", "HTTP 503 from orders")
	b.seed(t, "dead", 2, "order.created", "orders", "a rare timeout")
	b.seed(t, "rejected", 2, "bad", "orders", "missing event_id")
	b.exec(t, "ANALYZE inbox")
	_, body := get(t, nil, b.srv.URL+"/ui/")
	dead := idText(t, body, "n-dead")
	n, err := strconv.Atoi(strings.TrimPrefix(dead, "≈"))
	if !strings.HasPrefix(dead, "≈") || err != nil || n <= driver.ExactCountLimit {
		t.Errorf("n-dead = %q, want ≈ and a count above %d", dead, driver.ExactCountLimit)
	}
	if got := idText(t, body, "n-rejected"); got != "2" {
		t.Errorf("n-rejected = %q, want 2 (exact)", got)
	}
	b.exec(t, "DROP EXTENSION pg_trgm CASCADE")
	_, body = get(t, nil, b.srv.URL+"/ui/rows?status=dead&error=RARE+TIMEOUT")
	if got := len(regexp.MustCompile(`<td class="num"><a href="/ui/rows/(\d+)">`).FindAllString(body, -1)); got != 2 {
		t.Errorf("dead rows by error text without the index: %d, want 2\n%s", got, body)
	}
}
