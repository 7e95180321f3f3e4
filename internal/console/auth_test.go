package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
)

// The reported case (issue 25, item 11): with a token configured, the
// pages answered without any credential, and a webhook row's page showed
// its x-api-key header. Every page now needs the credential (the sign-in
// form and the style sheet excepted), and a signed-in operator sees
// credential-like header values masked.
func TestPagesNeedTheCredential(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	b.exec(t, `INSERT INTO inbox (source, event_id, event_type, status, key, last_error, headers) VALUES
		('hooks', 'evt-1', 'order.paid', 'dead', 'k', 'boom',
		 '{"x-api-key":"sk_live_123","authorization":"Bearer sk_live_456","content-type":"application/json"}')`)
	var id int64
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT id FROM inbox`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	pages := []string{"/ui/", "/ui/rows?status=dead", fmt.Sprintf("/ui/rows/%d", id),
		"/ui/search?event_id=evt-1&list=1", "/ui/search?event_id=evt-1", "/ui/blocked"}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range pages {
		code, body := get(t, noRedirect, b.srv.URL+p)
		if code != http.StatusUnauthorized || strings.Contains(body, "sk_live") || strings.Contains(body, "order.paid") || strings.Contains(body, "boom") {
			t.Errorf("GET %s without a credential: %d, want 401 with nothing of the inbox:\n%s", p, code, body)
		}
		if !strings.Contains(body, `id="token"`) {
			t.Errorf("GET %s without a credential does not offer the sign-in form", p)
		}
	}
	bearer := func(token string) *http.Client {
		return &http.Client{Transport: bearerTransport{token}, CheckRedirect: noRedirect.CheckRedirect}
	}
	if code, _ := get(t, bearer("wrong-token-0123456789"), b.srv.URL+"/ui/"); code != http.StatusUnauthorized {
		t.Errorf("a wrong bearer token: %d, want 401", code)
	}
	for _, p := range []string{"/ui/signin", "/ui/static/style.css"} {
		if code, _ := get(t, nil, b.srv.URL+p); code != http.StatusOK {
			t.Errorf("GET %s without a credential: %d, want 200", p, code)
		}
	}

	c, _ := signedIn(t, b)
	for _, cl := range []*http.Client{c, bearer(testToken)} {
		code, body := get(t, cl, b.srv.URL+fmt.Sprintf("/ui/rows/%d", id))
		if code != http.StatusOK || !strings.Contains(body, "evt-1") {
			t.Fatalf("the row's page signed in: %d\n%s", code, body)
		}
		if strings.Contains(body, "sk_live") {
			t.Errorf("the row's page shows a credential header's value:\n%s", body)
		}
		if !strings.Contains(body, "application/json") || !strings.Contains(body, "x-api-key") {
			t.Errorf("the row's page lost the headers that are not credentials, or their names:\n%s", body)
		}
	}
}

// bearerTransport adds an Authorization: Bearer header to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// The reported case (issue 25, item 12): after POST /ui/signout, the old
// cookie with its CSRF token still paused a route. Sign-out ends the
// session on the server: the old cookie is refused.
func TestSignOutEndsTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	c, csrf := signedIn(t, b)
	u, _ := url.Parse(b.srv.URL + Prefix)
	old := c.Jar.Cookies(u)
	if len(old) != 1 {
		t.Fatalf("signed in with %d cookies, want 1", len(old))
	}
	if code, _ := post(t, c, b.srv.URL+"/ui/signout", url.Values{"csrf": {csrf}}, ""); code != http.StatusOK {
		t.Fatalf("sign out: %d", code)
	}
	// The browser dropped the cookie; an attacker who copied it did not.
	jar, _ := cookiejar.New(nil)
	jar.SetCookies(u, old)
	replay := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	code, _ := post(t, replay, b.srv.URL+"/ui/routes/pause", url.Values{"csrf": {csrf}, "route": {"order.created"}, "reason": {"x"}}, "")
	if code != http.StatusUnauthorized {
		t.Errorf("the signed-out cookie's action: %d, want 401", code)
	}
	var n int
	_ = b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM route_controls").Scan(&n)
	if n != 0 {
		t.Errorf("the signed-out cookie paused a route")
	}
	if code, _ := get(t, replay, b.srv.URL+"/ui/"); code != http.StatusUnauthorized {
		t.Errorf("the signed-out cookie reads a page: %d, want 401", code)
	}
}
