package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
)

// The session cookie's name and its lifetime.
const (
	sessionCookie = "inboxd_ui_session"
	// DefaultSessionTTL is how long a sign-in lasts when Config.SessionTTL
	// is zero.
	DefaultSessionTTL = 8 * time.Hour
)

// sharedTokenUser names the operator of the shared token
// (INBOXD_UI_TOKEN_FILE) who gave no name at sign-in, and of its bearer
// requests.
const sharedTokenUser = "token"

// who is the credential a request carries.
type who struct {
	// ok is true when the request is authenticated.
	ok bool
	// user names the operator in logs, route pauses and the audit trail:
	// the users file's name, the trusted proxy's, or, with the shared
	// token, the name given at sign-in ("token" for none).
	user string
	// role is what the operator may do.
	role Role
	// csrf is the CSRF token of a cookie session; "" for a bearer request,
	// which needs none (a browser never adds the header by itself).
	csrf string
	// bearer is true when the request came with the Authorization header.
	bearer bool
	// via says how: "users file", "proxy", "shared token".
	via string
	// newSession is the id of a session started for this request (a
	// proxy's user seen for the first time): its cookie goes out with the
	// response.
	newSession string
}

// can reports whether w may do what role may.
func (w who) can(role Role) bool { return w.ok && w.role >= role }

// The ways in, as who.via and the audit trail name them.
const (
	viaUsers  = "users file"
	viaProxy  = "proxy"
	viaShared = "shared token"
)

// auth checks credentials and keeps sessions. A session lives in the
// database's console_sessions table (server-side: a sign-out ends it on
// every replica sharing the database); the cookie holds a random session
// id, the table its SHA-256, the operator's name and a tag of the
// credential that signed it in: a user's new token (or the shared
// token's change) ends their sessions, a user taken out of the users file
// is refused at once, and a role changed there counts from the next
// request. The CSRF token of a session is an HMAC keyed by its id, which
// only the cookie holds.
type auth struct {
	token []byte // the shared token; nil: none
	tag   []byte // the shared token's session tag
	users *usersFile
	proxy ProxyAuth
	ttl   time.Duration
	now   func() time.Time
	db    driver.DB
}

// ProxyAuth is the single sign-on of a trusted reverse proxy (oauth2-proxy
// and the like), which signs the operator in and passes their name in a
// header.
type ProxyAuth struct {
	// Header names the header holding the operator's name
	// (X-Auth-Request-User, X-Forwarded-Email); "" turns it off.
	Header string
	// Trusted are the addresses the proxy connects from: the header of a
	// request from anywhere else is ignored.
	Trusted []netip.Prefix
	// Role is the role of a proxy's user the users file does not name;
	// RoleNone refuses them.
	Role Role
	// SignOutURL is where the console's sign-out sends a proxy's user next
	// (oauth2-proxy's /oauth2/sign_out), ending the proxy's own session;
	// "" ends the console's alone.
	SignOutURL string
}

// ParseProxy reads the single sign-on proxy's settings: the header
// (INBOXD_UI_PROXY_HEADER; "" is no proxy), the addresses or CIDR ranges
// it connects from (INBOXD_UI_TRUSTED_PROXIES, required with a header), the
// role of the names the users file does not hold (INBOXD_UI_PROXY_ROLE:
// viewer, operator, admin or none) and where sign-out sends its users
// (INBOXD_UI_PROXY_SIGNOUT_URL). Every bad setting is an error of its own,
// naming the variable.
func ParseProxy(header string, trusted []string, role, signOutURL string) (ProxyAuth, error) {
	var errs []error
	p := ProxyAuth{Header: strings.TrimSpace(header), SignOutURL: signOutURL}
	for _, s := range trusted {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if pr, err := netip.ParsePrefix(s); err == nil {
			p.Trusted = append(p.Trusted, pr.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			p.Trusted = append(p.Trusted, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		} else {
			errs = append(errs, fmt.Errorf("INBOXD_UI_TRUSTED_PROXIES: %q is neither an address nor a CIDR range", s))
		}
	}
	if role != "none" {
		r, err := ParseRole(role)
		if err != nil {
			errs = append(errs, fmt.Errorf("INBOXD_UI_PROXY_ROLE: %w (or none)", err))
		}
		p.Role = r
	}
	if p.Header != "" && len(p.Trusted) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("INBOXD_UI_TRUSTED_PROXIES: is required with INBOXD_UI_PROXY_HEADER: the header is taken from the proxy's addresses alone"))
	}
	if p.Header == "" {
		p = ProxyAuth{}
	}
	return p, errors.Join(errs...)
}

// enabled reports whether the proxy's header is taken.
func (p ProxyAuth) enabled() bool { return p.Header != "" && len(p.Trusted) > 0 }

// trusts reports whether the request came from the proxy.
func (p ProxyAuth) trusts(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range p.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// newAuth returns the auth of the shared token ("" = none), the users file
// (nil = none) and the proxy, its sessions in db.
func newAuth(token string, users *usersFile, proxy ProxyAuth, ttl time.Duration, now func() time.Time, db driver.DB) *auth {
	a := &auth{users: users, proxy: proxy, ttl: ttl, now: now, db: db}
	if ttl <= 0 {
		a.ttl = DefaultSessionTTL
	}
	if token != "" {
		a.token = []byte(token)
		a.tag = derive(a.token, "inboxd console session tag")[:16]
	}
	return a
}

// derive is the HMAC-SHA256 of label under key.
func derive(key []byte, label string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// enabled reports whether a credential is configured: every page and
// action needs one.
func (a *auth) enabled() bool { return a.token != nil || a.users != nil || a.proxy.enabled() }

// signsIn reports whether the sign-in form takes a token: the shared one
// or a user's.
func (a *auth) signsIn() bool { return a.token != nil || a.users != nil }

// named reports whether the sign-in form's token names its operator (a
// users file): no name is asked.
func (a *auth) named() bool { return a.users != nil && a.token == nil }

// userTag is the session tag of a users file's user: it changes with
// their token.
func userTag(u user) []byte { return derive(u.hash[:], "inboxd console session tag|"+u.name)[:16] }

// proxyTag is the session tag of a proxy's user.
func proxyTag(name string) []byte { return derive([]byte(name), "inboxd console proxy session")[:16] }

// byToken returns who a presented token signs in: a user of the users
// file, or the shared token's operator (named name, "token" for "").
func (a *auth) byToken(got, name string) (who, bool) {
	if a.users != nil {
		if u, ok := a.users.users().byHash[sha256.Sum256([]byte(got))]; ok {
			return who{ok: true, user: u.name, role: u.role, via: viaUsers}, true
		}
	}
	if a.token != nil {
		x := sha256.Sum256([]byte(got))
		y := sha256.Sum256(a.token)
		if subtle.ConstantTimeCompare(x[:], y[:]) == 1 {
			if name == "" {
				name = sharedTokenUser
			}
			return who{ok: true, user: name, role: RoleAdmin, via: viaShared}, true
		}
	}
	return who{}, false
}

// tagOf is the session tag of w's credential.
func (a *auth) tagOf(w who) []byte {
	switch w.via {
	case viaShared:
		return a.tag
	case viaProxy:
		return proxyTag(w.user)
	}
	if a.users != nil {
		if u, ok := a.users.users().byName[w.user]; ok && !u.noToken {
			return userTag(u)
		}
	}
	return nil
}

// idHash is the table's key of a cookie's session id.
func idHash(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

// newSession signs w in: it records a session and returns the cookie's
// value, its id.
func (a *auth) newSession(ctx context.Context, w who) (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(raw)
	now := a.now()
	// Sessions that expired a while ago go first: the table stays a few
	// rows per recent sign-in.
	if _, err := driver.PruneConsoleSessions(ctx, a.db, now.Add(-time.Hour)); err != nil {
		return "", err
	}
	err := driver.CreateConsoleSession(ctx, a.db, driver.ConsoleSession{IDHash: idHash(id), Operator: w.user,
		TokenTag: a.tagOf(w), ExpiresAt: now.Add(a.ttl)})
	return id, err
}

// session returns who the live session id signs in; ok is false for no
// such session, an ended one, an expired one, or one whose credential is
// gone (a user out of the users file, a new token). proxyUser is the
// trusted proxy's user of the request, "" for none: a proxy's session
// holds only for that user, through the proxy.
func (a *auth) session(ctx context.Context, id, proxyUser string) (who, bool, error) {
	if !a.enabled() || id == "" || len(id) > 64 {
		return who{}, false, nil
	}
	s, found, err := driver.GetConsoleSession(ctx, a.db, idHash(id))
	if err != nil || !found || !a.now().Before(s.ExpiresAt) {
		return who{}, false, err
	}
	w := who{ok: true, user: s.Operator, csrf: csrfFor(id)}
	switch {
	case a.token != nil && hmac.Equal(s.TokenTag, a.tag):
		w.role, w.via = RoleAdmin, viaShared
	case proxyUser != "" && proxyUser == s.Operator && hmac.Equal(s.TokenTag, proxyTag(s.Operator)):
		w.role, w.via = a.proxyRole(s.Operator), viaProxy
	default:
		if a.users == nil {
			return who{}, false, nil
		}
		u, ok := a.users.users().byName[s.Operator]
		if !ok || u.noToken || !hmac.Equal(s.TokenTag, userTag(u)) {
			return who{}, false, nil
		}
		w.role, w.via = u.role, viaUsers
	}
	if w.role == RoleNone {
		return who{}, false, nil
	}
	return w, true, nil
}

// proxyRole is the role of the proxy's user name: the users file's, else
// ProxyAuth.Role.
func (a *auth) proxyRole(name string) Role {
	if a.users != nil {
		if u, ok := a.users.users().byName[name]; ok {
			return u.role
		}
	}
	return a.proxy.Role
}

// endSession signs the session id out, on every replica.
func (a *auth) endSession(ctx context.Context, id string) (bool, error) {
	if id == "" || len(id) > 64 {
		return false, nil
	}
	return driver.EndConsoleSession(ctx, a.db, idHash(id))
}

// csrfFor is the CSRF token of the session id: an HMAC keyed by the id,
// which the HttpOnly cookie alone holds, so that every replica computes it
// and no page of another origin can.
func csrfFor(id string) string {
	m := hmac.New(sha256.New, []byte(id))
	m.Write([]byte("inboxd console csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

// check returns the credential r carries: a valid bearer token, the
// trusted proxy's header, or the cookie of a live session. A proxy's user
// seen without a session of theirs gets one (who.newSession), for the
// CSRF tokens of their forms. An error is the database's: the session
// could not be looked up.
func (a *auth) check(r *http.Request) (who, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			if w, ok := a.byToken(t, ""); ok {
				w.bearer = true
				return w, nil
			}
		}
		return who{}, nil
	}
	proxyUser := ""
	if a.proxy.enabled() && a.proxy.trusts(r) {
		proxyUser = strings.TrimSpace(r.Header.Get(a.proxy.Header))
		if !validName(proxyUser) {
			proxyUser = ""
		}
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		w, ok, err := a.session(r.Context(), c.Value, proxyUser)
		if err != nil {
			return who{}, err
		}
		if ok && (proxyUser == "" || w.user == proxyUser) {
			return w, nil
		}
	}
	if proxyUser == "" {
		return who{}, nil
	}
	w := who{ok: true, user: proxyUser, role: a.proxyRole(proxyUser), via: viaProxy}
	if w.role == RoleNone {
		return who{}, nil
	}
	id, err := a.newSession(r.Context(), w)
	if err != nil {
		return who{}, err
	}
	w.newSession, w.csrf = id, csrfFor(id)
	return w, nil
}

// csrfOK reports whether a POST of w carries its CSRF token: always for a
// bearer request.
func (w who) csrfOK(r *http.Request) bool {
	if w.bearer {
		return true
	}
	got := r.PostFormValue("csrf")
	return w.csrf != "" && w.newSession == "" && hmac.Equal([]byte(got), []byte(w.csrf))
}

// whoKey is the request context's key of its who.
type whoKey struct{}

// whoOf returns the credential the console's gate found on r.
func whoOf(r *http.Request) who {
	c, _ := r.Context().Value(whoKey{}).(who)
	return c
}
