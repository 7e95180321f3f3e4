package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
)

// clock is a settable clock for the console's Config.Now.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func usersLine(name, role, token string) string {
	if token == "" {
		return name + " " + role + " -\n"
	}
	return name + " " + role + " " + HashToken(token) + "\n"
}

// writeUsers writes the users file of lines at path.
func writeUsers(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("# name role token-hash\n"+strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tokenSession signs in with token alone (a users file names its
// operator) and returns the client and its CSRF token.
func tokenSession(t *testing.T, b *bundle, token string) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	code, body := post(t, c, b.srv.URL+"/ui/signin", url.Values{"token": {token}}, "")
	if code != http.StatusOK {
		t.Fatalf("sign in: %d\n%s", code, body)
	}
	return c, csrfOf(t, body)
}

// csrfOf returns the CSRF token of a page's forms.
func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	return m[1]
}

// pauses returns the route_controls rows: route and who paused it.
func pauses(t *testing.T, b *bundle) string {
	t.Helper()
	var s string
	if err := b.db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(string_agg(route || ' by ' || paused_by, ', ' ORDER BY route), '') FROM route_controls WHERE paused`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Named operators with roles from a users file: each token names its
// operator (the sign-in form asks no name); a viewer reads every page and
// is refused every action; an operator pauses a route under their own
// name and acts on rows up to the bulk bound, over which an admin is
// needed. The file is read again when it changes, without a restart: a
// rotated token ends the sessions of the old one and signs in with the
// new, an operator taken out is refused at once, a role changed counts
// from the next request. A file that turns bad keeps the users as they
// were.
func TestUsersFileRolesAndRotation(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "users")
	const alice, bob, vic = "alice-token-0123456789", "bob-token-0123456789", "vic-token-0123456789"
	writeUsers(t, path, usersLine("alice", "admin", alice), usersLine("bob", "operator", bob), usersLine("vic", "viewer", vic))
	clk := newClock()
	b := setup(t, "", func(c *Config) {
		c.UsersFile, c.Now, c.BulkAdminOver = path, clk.now, 2
		c.Routes = func() ([]handlers.RouteConfig, error) { return []handlers.RouteConfig{{Type: "order.created"}}, nil } // the routes file's
	})
	b.seed(t, "dead", 3, "order.created", "orders", "boom")

	_, form := get(t, nil, b.srv.URL+"/ui/signin")
	if strings.Contains(form, `id="user"`) || !strings.Contains(form, `id="token"`) {
		t.Errorf("with a users file the sign-in form asks for a name:\n%s", form)
	}
	vc, vcsrf := tokenSession(t, b, vic)
	if code, body := get(t, vc, b.srv.URL+"/ui/rows?status=dead"); code != http.StatusOK || idText(t, body, "role") != "viewer" || idText(t, body, "who") != "vic" {
		t.Fatalf("the viewer's page: %d\n%s", code, body)
	}
	pause := url.Values{"route": {"order.created"}, "reason": {"x"}}
	pause.Set("csrf", vcsrf)
	if code, body := post(t, vc, b.srv.URL+"/ui/routes/pause", pause, ""); code != http.StatusForbidden || !strings.Contains(body, "needs an operator") {
		t.Errorf("a viewer's pause: %d, want 403\n%s", code, body)
	}
	requeue := url.Values{"csrf": {vcsrf}, "status": {"dead"}, "confirm": {"yes"}}
	if code, _ := post(t, vc, b.srv.URL+"/ui/requeue", requeue, ""); code != http.StatusForbidden {
		t.Errorf("a viewer's requeue: %d, want 403", code)
	}
	if code, _ := post(t, nil, b.srv.URL+"/ui/routes/pause", pause, vic); code != http.StatusForbidden {
		t.Errorf("a viewer's bearer pause: %d, want 403", code)
	}

	bc, bcsrf := tokenSession(t, b, bob)
	pause.Set("csrf", bcsrf)
	if code, _ := post(t, bc, b.srv.URL+"/ui/routes/pause", pause, ""); code != http.StatusOK {
		t.Errorf("the operator's pause: %d", code)
	}
	if got := pauses(t, b); got != "order.created by bob" {
		t.Errorf("paused: %q, want the operator's name", got)
	}
	// Three dead rows: over the bound of 2 for an operator, dry run or not.
	for _, confirm := range []string{"", "yes"} {
		f := url.Values{"csrf": {bcsrf}, "status": {"dead"}, "confirm": {confirm}}
		if code, body := post(t, bc, b.srv.URL+"/ui/requeue", f, ""); code != http.StatusForbidden || !strings.Contains(body, "over 2 rows needs an admin") {
			t.Errorf("the operator's bulk requeue of 3 (confirm=%q): %d, want 403\n%s", confirm, code, body)
		}
	}
	one := url.Values{"csrf": {bcsrf}, "status": {"dead"}, "id": {"1"}, "confirm": {"yes"}}
	if _, body := post(t, bc, b.srv.URL+"/ui/requeue", one, ""); idText(t, body, "count") != "1" {
		t.Errorf("the operator's requeue of one row:\n%s", body)
	}
	if _, body := post(t, nil, b.srv.URL+"/ui/requeue", url.Values{"status": {"dead"}, "confirm": {"yes"}}, alice); idText(t, body, "count") != "2" {
		t.Errorf("the admin's bulk requeue:\n%s", body)
	}

	// Rotation: bob's new token; vic out; the file read again within a
	// check's interval, no restart.
	const bob2 = "bob-new-token-0123456789"
	writeUsers(t, path, usersLine("alice", "admin", alice), usersLine("bob", "admin", bob2))
	clk.advance(2 * usersCheckEvery)
	if code, _ := get(t, bc, b.srv.URL+"/ui/"); code != http.StatusUnauthorized {
		t.Errorf("a session of bob's old token after the rotation: %d, want 401", code)
	}
	if code, _ := get(t, nil, b.srv.URL+"/ui/"); code != http.StatusUnauthorized {
		t.Errorf("no credential: %d", code)
	}
	if code, _ := post(t, nil, b.srv.URL+"/ui/signin", url.Values{"token": {bob}}, ""); code != http.StatusUnauthorized {
		t.Errorf("bob's old token signs in: %d, want 401", code)
	}
	if code, _ := get(t, vc, b.srv.URL+"/ui/"); code != http.StatusUnauthorized {
		t.Errorf("vic's session after vic left the file: %d, want 401", code)
	}
	bc2, _ := tokenSession(t, b, bob2)
	if _, body := get(t, bc2, b.srv.URL+"/ui/"); idText(t, body, "role") != "admin" {
		t.Errorf("bob's new role is not in force:\n%s", body)
	}

	// A file that turns bad keeps the users as they were, and says so.
	if err := os.WriteFile(path, []byte("alice admin not-a-hash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.advance(2 * usersCheckEvery)
	if code, _ := get(t, bc2, b.srv.URL+"/ui/"); code != http.StatusOK {
		t.Errorf("a bad users file ended a session: %d", code)
	}
	if l := b.log.String(); !strings.Contains(l, "changed but not valid") || !strings.Contains(l, "line 1") {
		t.Errorf("no log line for the bad users file:\n%s", l)
	}
	for _, tok := range []string{alice, bob, bob2, vic} {
		if strings.Contains(b.log.String(), tok) {
			t.Errorf("a token is in the log")
		}
	}
}

// A users file that does not parse stops the console at start, one
// error a bad line.
func TestUsersFileBadLines(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "users")
	writeUsers(t, path, "alice admin\n", "bob boss "+HashToken("x")+"\n", "carol viewer sha256:zz\n",
		"dan viewer "+HashToken("same")+"\n", "erin viewer "+HashToken("same")+"\n", "d@n! viewer -\n", "fay viewer -\n", "fay admin -\n")
	_, err := loadUsers(path, time.Now, zerolog.Nop())
	if err == nil {
		t.Fatal("a bad users file loaded")
	}
	for _, want := range []string{"line 2: want three fields", "line 3: role \"boss\"", "line 4: the token's hash", "line 6: erin has the token of dan",
		"line 7: name \"d@n!\"", "line 9: fay is named twice"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
}

// Sessions expire: past Config.SessionTTL the cookie is refused.
func TestSessionsExpire(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := setup(t, testToken, func(c *Config) { c.Now, c.SessionTTL = clk.now, time.Hour })
	c, _ := signedIn(t, b)
	if code, _ := get(t, c, b.srv.URL+"/ui/"); code != http.StatusOK {
		t.Fatalf("signed in: %d", code)
	}
	clk.advance(time.Hour + time.Second)
	if code, _ := get(t, c, b.srv.URL+"/ui/"); code != http.StatusUnauthorized {
		t.Errorf("an expired session: %d, want 401", code)
	}
}

// proxyGet sends a GET with the proxy's header hd = name, with c.
func proxyReq(t *testing.T, c *http.Client, method, u, hd, name string, form url.Values) (int, string) {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if name != "" {
		req.Header.Set(hd, name)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, sb.String()
}

// Single sign-on through a trusted reverse proxy: the header names the
// operator only on a request from a configured proxy address (from
// anywhere else it is ignored: 401); the users file gives a proxy's user
// their role, others take the proxy's default role, or are refused with
// none; a proxy's user gets a session for the CSRF tokens of their forms,
// held only through the proxy with the same name; sign-out ends it and
// goes to the proxy's own sign-out.
func TestProxyHeaderFromTrustedProxiesOnly(t *testing.T) {
	t.Parallel()
	const hd = "X-Auth-Request-User"
	path := filepath.Join(t.TempDir(), "users")
	writeUsers(t, path, usersLine("olga@example.com", "operator", ""))
	loop := netip.MustParsePrefix("127.0.0.0/8")
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		role    Role
		user    string
		want    int
		wantAs  string
	}{
		{"untrusted address", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, RoleViewer, "olga@example.com", http.StatusUnauthorized, ""},
		{"a user of the file", []netip.Prefix{loop}, RoleViewer, "olga@example.com", http.StatusOK, "operator"},
		{"an unknown user, default viewer", []netip.Prefix{loop}, RoleViewer, "pat@example.com", http.StatusOK, "viewer"},
		{"an unknown user, none", []netip.Prefix{loop}, RoleNone, "pat@example.com", http.StatusUnauthorized, ""},
		{"no header", []netip.Prefix{loop}, RoleViewer, "", http.StatusUnauthorized, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "", func(c *Config) {
				c.UsersFile, c.Proxy = path, ProxyAuth{Header: hd, Trusted: tc.trusted, Role: tc.role, SignOutURL: "/oauth2/sign_out"}
				c.Routes = func() ([]handlers.RouteConfig, error) { return []handlers.RouteConfig{{Type: "order.created"}}, nil } // the routes file's
			})
			jar, _ := cookiejar.New(nil)
			c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			code, body := proxyReq(t, c, http.MethodGet, b.srv.URL+"/ui/", hd, tc.user, nil)
			if code != tc.want {
				t.Fatalf("GET through the proxy as %q: %d, want %d\n%s", tc.user, code, tc.want, body)
			}
			if tc.want != http.StatusOK {
				return
			}
			if idText(t, body, "who") != tc.user || idText(t, body, "role") != tc.wantAs {
				t.Errorf("signed in as %q %q, want %q %q", idText(t, body, "who"), idText(t, body, "role"), tc.user, tc.wantAs)
			}
			// The session holds through the proxy, for that name alone.
			if code, _ := get(t, c, b.srv.URL+"/ui/"); code != http.StatusUnauthorized {
				t.Errorf("the proxy's session without the proxy's header: %d, want 401", code)
			}
			if code, body := proxyReq(t, c, http.MethodGet, b.srv.URL+"/ui/", hd, "mallory", nil); code != http.StatusOK || idText(t, body, "who") != "mallory" {
				t.Errorf("another name through the proxy is not that name: %d", code)
			}
			code, body = proxyReq(t, c, http.MethodGet, b.srv.URL+"/ui/", hd, tc.user, nil)
			csrf := csrfOf(t, body)
			pause := url.Values{"route": {"order.created"}, "reason": {"x"}}
			if code, _ := proxyReq(t, c, http.MethodPost, b.srv.URL+"/ui/routes/pause", hd, tc.user, pause); code != http.StatusForbidden {
				t.Errorf("a proxy's user's pause without the CSRF token: %d, want 403", code)
			}
			pause.Set("csrf", csrf)
			code, _ = proxyReq(t, c, http.MethodPost, b.srv.URL+"/ui/routes/pause", hd, tc.user, pause)
			wantPause, wantBy := http.StatusSeeOther, "order.created by "+tc.user
			if tc.wantAs == "viewer" {
				wantPause, wantBy = http.StatusForbidden, ""
			}
			if code != wantPause || pauses(t, b) != wantBy {
				t.Errorf("a proxy's %s's pause: %d, paused %q; want %d, %q", tc.wantAs, code, pauses(t, b), wantPause, wantBy)
			}
			req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/ui/signout", strings.NewReader(""))
			req.Header.Set(hd, tc.user)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if loc := resp.Header.Get("Location"); loc != "/oauth2/sign_out" {
				t.Errorf("the sign-out goes to %q, want the proxy's sign-out", loc)
			}
			var ended int
			_ = b.db.Pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM console_sessions WHERE operator = '%s' AND ended_at IS NOT NULL`, tc.user)).Scan(&ended)
			if ended != 1 {
				t.Errorf("%d of %s's sessions ended by the sign-out, want 1", ended, tc.user)
			}
		})
	}
}
