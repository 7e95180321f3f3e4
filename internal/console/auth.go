package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
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
	// ok is true when the request is authorised to act.
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

// auth checks tokens and signs sessions. Its key derives from the token,
// so that every replica with the same token accepts the others' sessions
// and a new token ends every session.
type auth struct {
	token []byte // nil: read-only
	key   []byte
	ttl   time.Duration
	now   func() time.Time
}

// newAuth returns the auth of token ("" = read-only).
func newAuth(token string, ttl time.Duration, now func() time.Time) *auth {
	a := &auth{ttl: ttl, now: now}
	if ttl <= 0 {
		a.ttl = DefaultSessionTTL
	}
	if token != "" {
		a.token = []byte(token)
		m := hmac.New(sha256.New, a.token)
		m.Write([]byte("inboxd console session key"))
		a.key = m.Sum(nil)
	}
	return a
}

// enabled reports whether actions are possible at all.
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

// sign returns the MAC of msg.
func (a *auth) sign(msg string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// newSession returns a session cookie's value for user: the user, the
// expiry and a random nonce, then their MAC.
func (a *auth) newSession(user string) (string, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	payload := base64.RawURLEncoding.EncodeToString([]byte(user)) + "." +
		strconv.FormatInt(a.now().Add(a.ttl).Unix(), 10) + "." + hex.EncodeToString(nonce)
	return payload + "." + a.sign("session|"+payload), nil
}

// session checks a session cookie's value and returns its user and nonce.
func (a *auth) session(v string) (user, nonce string, ok bool) {
	if a.token == nil {
		return "", "", false
	}
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return "", "", false
	}
	payload, mac := v[:i], v[i+1:]
	if !hmac.Equal([]byte(mac), []byte(a.sign("session|"+payload))) {
		return "", "", false
	}
	parts := strings.Split(payload, ".")
	if len(parts) != 3 {
		return "", "", false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || !a.now().Before(time.Unix(exp, 0)) {
		return "", "", false
	}
	u, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return "", "", false
	}
	return string(u), parts[2], true
}

// csrfFor is the CSRF token of the session with nonce.
func (a *auth) csrfFor(nonce string) string { return a.sign("csrf|" + nonce) }

// check returns the credential r carries: a valid bearer token, or a
// valid session cookie.
func (a *auth) check(r *http.Request) who {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok && a.tokenOK(t) {
			return who{ok: true, user: "token", bearer: true}
		}
		return who{}
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return who{}
	}
	user, nonce, ok := a.session(c.Value)
	if !ok {
		return who{}
	}
	return who{ok: true, user: user, csrf: a.csrfFor(nonce)}
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
