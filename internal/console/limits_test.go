package console

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// fakeLocal is a replica's figures: one route with its breaker open.
type fakeLocal struct{}

func (fakeLocal) Routes() []RouteState {
	return []RouteState{{Route: "order.created", Concurrency: 4, Breaker: "open"}, {Route: "other", Concurrency: 4, Breaker: "closed"}}
}
func (fakeLocal) IngestLag() []PartitionLag { return nil }

// Rate overrides and breaker resets are an admin's: a viewer and an
// operator are refused them (403, by session or bearer), and so is a form
// without its CSRF token; the admin sets a rate (0 or less refused with
// the reason, an unknown route too), sees it on the overview beside the
// routes file's and the breaker's state in this replica, clears it and
// resets the breaker, each under their own name.
func TestRateAndBreakerAreAnAdmins(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "users")
	const alice, bob, vic = "alice-token-0123456789", "bob-token-0123456789", "vic-token-0123456789"
	writeUsers(t, path, usersLine("alice", "admin", alice), usersLine("bob", "operator", bob), usersLine("vic", "viewer", vic))
	b := setup(t, "", func(c *Config) {
		c.UsersFile, c.Local = path, fakeLocal{}
		c.Routes = func() ([]handlers.RouteConfig, error) {
			return []handlers.RouteConfig{{Type: "order.created", Rate: 200, Breaker: handlers.Breaker{Failures: 5, CoolDown: time.Minute}}}, nil
		}
	})
	ctx := context.Background()
	controls := func() string {
		t.Helper()
		var s string
		if err := b.db.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(route || ' ' || coalesce(rate::text || '/' || coalesce(burst::text, '-') || ' by ' || rate_by, 'no rate')
			|| coalesce(' reset by ' || breaker_reset_by, ''), ', ' ORDER BY route), '') FROM route_controls`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	rate := url.Values{"route": {"order.created"}, "rate": {"20"}, "burst": {"5"}}
	reset := url.Values{"route": {"order.created"}}
	for tok, who := range map[string]string{vic: "vic is a viewer", bob: "bob is an operator"} {
		c, csrf := tokenSession(t, b, tok)
		if _, body := get(t, c, b.srv.URL+"/ui/"); strings.Contains(body, `action="/ui/routes/rate"`) || strings.Contains(body, `action="/ui/routes/reset-breaker"`) {
			t.Errorf("a non-admin is offered the rate or breaker forms")
		}
		for path, form := range map[string]url.Values{"/ui/routes/rate": rate, "/ui/routes/reset-breaker": reset} {
			f := url.Values{"csrf": {csrf}}
			for k, v := range form {
				f[k] = v
			}
			if code, body := post(t, c, b.srv.URL+path, f, ""); code != http.StatusForbidden || !strings.Contains(body, who+": this action needs an admin") {
				t.Errorf("%s by session %s: %d, want 403\n%s", path, tok, code, body)
			}
			if code, _ := post(t, nil, b.srv.URL+path, form, tok); code != http.StatusForbidden {
				t.Errorf("%s by bearer %s: %d, want 403", path, tok, code)
			}
		}
	}
	if got := controls(); got != "" {
		t.Fatalf("refused changes wrote %q", got)
	}

	ac, acsrf := tokenSession(t, b, alice)
	if code, _ := post(t, ac, b.srv.URL+"/ui/routes/rate", rate, ""); code != http.StatusForbidden {
		t.Errorf("the admin's rate without the CSRF token: %d, want 403", code)
	}
	with := func(v url.Values) url.Values {
		f := url.Values{"csrf": {acsrf}}
		for k, x := range v {
			f[k] = x
		}
		return f
	}
	for _, bad := range []struct{ rate, route, want string }{
		{"0", "order.created", "the rate must be more than 0 rows a second"},
		{"-3", "order.created", "the rate must be more than 0 rows a second"},
		{"fast", "order.created", "the rate must be a number"},
		{"10", "order.nonexistent", "no such route"},
	} {
		if code, body := post(t, ac, b.srv.URL+"/ui/routes/rate", with(url.Values{"route": {bad.route}, "rate": {bad.rate}}), ""); code != http.StatusBadRequest || !strings.Contains(body, bad.want) {
			t.Errorf("rate %s of %s: %d, want 400 saying %q\n%s", bad.rate, bad.route, code, bad.want, body)
		}
	}
	if code, body := post(t, ac, b.srv.URL+"/ui/routes/rate", with(rate), ""); code != http.StatusOK {
		t.Fatalf("the admin's rate: %d\n%s", code, body)
	}
	if got := controls(); got != "order.created 20/5 by alice" {
		t.Errorf("route controls %q after the rate", got)
	}
	_, body := get(t, ac, b.srv.URL+"/ui/")
	for _, want := range []string{"20/s (burst 5) by alice", "200/s (burst: one second&#39;s worth)", "opens after 5 failures for 1m0s", `<span class="breaker-open">open</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %q", want)
		}
	}
	if code, _ := post(t, ac, b.srv.URL+"/ui/routes/rate", with(url.Values{"route": {"order.created"}, "clear": {"yes"}}), ""); code != http.StatusOK {
		t.Errorf("clear: %d", code)
	}
	if code, _ := post(t, nil, b.srv.URL+"/ui/routes/reset-breaker", reset, alice); code != http.StatusOK {
		t.Errorf("the admin's bearer reset: %d", code)
	}
	if got := controls(); got != "order.created no rate reset by alice" {
		t.Errorf("route controls %q after the clear and the reset", got)
	}
	var audit string
	if err := b.db.Pool.QueryRow(ctx, `SELECT string_agg(operator || ' ' || action, ', ' ORDER BY id) FROM ops_audit WHERE action IN ('rate_change', 'breaker_reset')`).Scan(&audit); err != nil {
		t.Fatal(err)
	}
	if audit != "alice rate_change, alice rate_change, alice breaker_reset" {
		t.Errorf("audit: %s", audit)
	}
}
