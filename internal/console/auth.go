package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
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

// who is the credential a request carries.
type who struct {
	// ok is true when the request is authenticated.
	ok bool
	// user names the operator in logs and route pauses: the sign-in
	// name, or "token" for a bearer request or a sign-in without a name.
	user string
	// csrf is the CSRF token of a cookie session; "" for a bearer request,
	// which needs none (a browser never adds the header by itself).
	csrf string
	// bearer is true when the request came with the Authorization header.
	bearer bool
}

// auth checks tokens and keeps sessions. A session lives in the
// database's console_sessions table (server-side: a sign-out ends it on
// every replica sharing the database); the cookie holds a random session
// id, the table its SHA-256. The CSRF token of a session is an HMAC of its
// id under a key derived from the console token, and every session
// records which token signed it in, so that a new token ends every
// session.
type auth struct {
	token []byte // nil: no credential, a read-only console
	key   []byte // the CSRF tokens' key
	tag   []byte // which token: stored with each session
	ttl   time.Duration
	now   func() time.Time
	db    driver.DB
}

// newAuth returns the auth of token ("" = read-only), its sessions in db.
func newAuth(token string, ttl time.Duration, now func() time.Time, db driver.DB) *auth {
	a := &auth{ttl: ttl, now: now, db: db}
	if ttl <= 0 {
		a.ttl = DefaultSessionTTL
	}
	if token != "" {
		a.token = []byte(token)
		a.key = derive(a.token, "inboxd console csrf key")
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
// action needs it.
func (a *auth) enabled() bool { return a.token != nil }

// tokenOK compares a presented token with the token in constant time
// (hashing both first, so that neither the length leaks).
func (a *auth) tokenOK(got string) bool {
	if a.token == nil {
		return false
	}
	x := sha256.Sum256([]byte(got))
	y := sha256.Sum256(a.token)
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// idHash is the table's key of a cookie's session id.
func idHash(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

// newSession signs user in: it records a session and returns the
// cookie's value, its id.
func (a *auth) newSession(ctx context.Context, user string) (string, error) {
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
	err := driver.CreateConsoleSession(ctx, a.db, driver.ConsoleSession{IDHash: idHash(id), Operator: user,
		TokenTag: a.tag, ExpiresAt: now.Add(a.ttl)})
	return id, err
}

// session returns the user of the live session id; ok is false for no
// such session, an ended one, one of another token, or an expired one.
func (a *auth) session(ctx context.Context, id string) (user string, ok bool, err error) {
	if a.token == nil || id == "" || len(id) > 64 {
		return "", false, nil
	}
	s, found, err := driver.GetConsoleSession(ctx, a.db, idHash(id), a.tag)
	if err != nil || !found || !a.now().Before(s.ExpiresAt) {
		return "", false, err
	}
	return s.Operator, true, nil
}

// endSession signs the session id out, on every replica.
func (a *auth) endSession(ctx context.Context, id string) (bool, error) {
	if id == "" || len(id) > 64 {
		return false, nil
	}
	return driver.EndConsoleSession(ctx, a.db, idHash(id))
}

// csrfFor is the CSRF token of the session id.
func (a *auth) csrfFor(id string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte("csrf|" + id))
	return hex.EncodeToString(m.Sum(nil))
}

// check returns the credential r carries: a valid bearer token, or the
// cookie of a live session. An error is the database's: the session could
// not be looked up.
func (a *auth) check(r *http.Request) (who, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok && a.tokenOK(t) {
			return who{ok: true, user: "token", bearer: true}, nil
		}
		return who{}, nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return who{}, nil
	}
	user, ok, err := a.session(r.Context(), c.Value)
	if err != nil || !ok {
		return who{}, err
	}
	return who{ok: true, user: user, csrf: a.csrfFor(c.Value)}, nil
}

// csrfOK reports whether a POST of w carries its CSRF token: always for a
// bearer request.
func (w who) csrfOK(r *http.Request) bool {
	if w.bearer {
		return true
	}
	got := r.PostFormValue("csrf")
	return w.csrf != "" && hmac.Equal([]byte(got), []byte(w.csrf))
}

// whoKey is the request context's key of its who.
type whoKey struct{}

// whoOf returns the credential the console's gate found on r.
func whoOf(r *http.Request) who {
	c, _ := r.Context().Value(whoKey{}).(who)
	return c
}
