package console

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/httpserve"
	"github.com/inboxd/inboxd/internal/ops"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// DB is what the console reads and changes the inbox through: a
// *pgxpool.Pool.
type DB interface {
	driver.DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Config is the console's configuration.
type Config struct {
	// DB is the inbox's database.
	DB DB
	// Token is the console's shared credential (INBOXD_UI_TOKEN_FILE):
	// whoever holds it is an admin, named by the sign-in form. With it, a
	// users file or a proxy, every page and action needs a credential (a
	// bearer header, a session from the sign-in form, the proxy's header);
	// with none the console is read-only and open to whoever reaches it,
	// which the daemon allows on a loopback address only.
	Token string
	// UsersFile names the users file (INBOXD_UI_USERS_FILE): an operator a
	// line, with their role and their token's hash (see HashToken); read
	// again when it changes. "" is none.
	UsersFile string
	// Proxy is the trusted reverse proxy's single sign-on; its zero value
	// is none.
	Proxy ProxyAuth
	// BulkAdminOver is the number of rows over which an action on a
	// filter or a selection needs an admin; zero is DefaultBulkAdminOver.
	BulkAdminOver int64
	// ShowPayloads shows the payloads of rows; they are hidden otherwise
	// (they may hold personal data).
	ShowPayloads bool
	// StaleAfter is the age past which a received row counts as stale
	// (INBOXD_STALE_AFTER).
	StaleAfter time.Duration
	// Local is what the console shows of the replica it runs in; nil in
	// `inboxd ui`.
	Local Local
	// BlockingTypes returns the event types of the ordered routes whose
	// dead rows hold their key back (on_dead: block), as the routes are
	// now: the blocked keys page lists their keys alone, as
	// inboxd_ordered_blocked_keys counts them. Nil: no route blocks.
	BlockingTypes func() []string
	// OrderedTypes returns the event types of the ordered routes, as the
	// routes are now: the blocked keys page lists their keys held back by
	// a failing head too. Nil: no route is ordered.
	OrderedTypes func() []string
	// Remap maps a rejected row again with the daemon's mapping settings,
	// by the rules `inboxd requeue --status rejected` applies. Nil: the
	// console does not requeue rejected rows.
	Remap ops.Remapper
	// Routes returns the routes file's routes: their event types, which a
	// pause accepts even before any row of theirs arrived, and their rate
	// limits and breakers, which the overview shows (nil: only the routes
	// the database knows).
	Routes func() ([]handlers.RouteConfig, error)
	// MaxAttempts returns the attempt budget of an event type's route, for
	// the lists ("attempt 6 of 25"); nil: not shown.
	MaxAttempts func(eventType string) int
	// Logger takes the console's lines (every action at info).
	Logger zerolog.Logger
	// SessionTTL is how long a sign-in lasts; zero is DefaultSessionTTL.
	// Sessions are kept in DB (the console_sessions table).
	SessionTTL time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Handler is the console: an http.Handler for the paths under Prefix.
type Handler struct {
	cfg     Config
	auth    *auth
	log     zerolog.Logger
	pages   map[string]*template.Template
	mux     *http.ServeMux
	ops     *ops.Ops
	signins chan struct{} // a token per sign-in form being read
}

// Bounds of what the console reads before a request is authenticated.
const (
	// maxFormBytes caps a form's body: the console's forms are a few
	// fields.
	maxFormBytes = 64 << 10
	// maxSignins caps the sign-in forms read at once (their bodies come
	// before any credential); more are answered 503 at once.
	maxSignins = 4
)

// DefaultBulkAdminOver is Config.BulkAdminOver's default: an action on
// more rows than this needs an admin.
const DefaultBulkAdminOver = 1000

// formPace is how fast a form's body must arrive (see httpserve.Pace).
var formPace = httpserve.Pace{Grace: httpserve.DefaultGrace, Rate: httpserve.DefaultMinRate, Stall: httpserve.DefaultStall}

// New returns the console of cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.DB == nil {
		return nil, fmt.Errorf("console: no database")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BulkAdminOver <= 0 {
		cfg.BulkAdminOver = DefaultBulkAdminOver
	}
	log := cfg.Logger.With().Str("component", "console").Logger()
	var users *usersFile
	if cfg.UsersFile != "" {
		var err error
		if users, err = loadUsers(cfg.UsersFile, cfg.Now, log); err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
	}
	h := &Handler{cfg: cfg, auth: newAuth(cfg.Token, users, cfg.Proxy, cfg.SessionTTL, cfg.Now, cfg.DB),
		log: log, pages: map[string]*template.Template{},
		signins: make(chan struct{}, maxSignins)}
	h.ops = ops.New(ops.Config{DB: cfg.DB, Remap: cfg.Remap, Routes: cfg.Routes, MaxAttempts: cfg.MaxAttempts,
		Breakers: localBreakers(cfg.Local), Logger: h.log})
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		h.pages[base] = t
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	m := http.NewServeMux()
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /ui/{$}", h.overview)
	m.HandleFunc("GET /ui/rows", h.rows)
	m.HandleFunc("GET /ui/rows/{id}", h.row)
	m.HandleFunc("GET /ui/search", h.search)
	m.HandleFunc("GET /ui/blocked", h.blocked)
	m.HandleFunc("GET /ui/audit", h.audit)
	m.HandleFunc("GET /ui/throughput", h.throughput)
	m.HandleFunc("GET /ui/signin", h.signinForm)
	m.HandleFunc("POST /ui/signin", h.signin)
	m.HandleFunc("POST /ui/signout", h.signout)
	m.HandleFunc("POST /ui/requeue", h.action(RoleOperator, h.requeue))
	m.HandleFunc("POST /ui/discard", h.action(RoleOperator, h.discard))
	m.HandleFunc("POST /ui/cancel", h.action(RoleOperator, h.cancel))
	m.HandleFunc("POST /ui/retry", h.action(RoleOperator, h.retryNow))
	m.HandleFunc("POST /ui/routes/pause", h.action(RoleOperator, h.pause))
	m.HandleFunc("POST /ui/routes/resume", h.action(RoleOperator, h.resume))
	m.HandleFunc("POST /ui/routes/rate", h.action(RoleAdmin, h.rate))
	m.HandleFunc("POST /ui/routes/reset-breaker", h.action(RoleAdmin, h.resetBreaker))
	h.mux = m
	return h, nil
}

// ServeHTTP implements http.Handler: every response carries the security
// headers, pages are never stored by a cache, and, with a token
// configured, every path but the sign-in form, the sign-out and the style
// sheet needs the credential: without it the answer is 401 with the
// sign-in form, and nothing of the inbox.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	if !strings.HasPrefix(r.URL.Path, "/ui/static/") {
		hd.Set("Cache-Control", "no-store")
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, httpserve.PacedBody(w, r, formPace), maxFormBytes)
	}
	if h.auth.enabled() && !public(r.URL.Path) {
		c, err := h.auth.check(r)
		if err != nil {
			h.dbFail(w, r, "check the session", err)
			return
		}
		if !c.ok {
			h.askSignIn(w, r)
			return
		}
		if c.newSession != "" {
			if err := h.ops.Record(r.Context(), operator(r, c), ops.ActSignIn, "as "+c.role.String()+" via "+c.via); err != nil {
				_, _ = h.auth.endSession(context.WithoutCancel(r.Context()), c.newSession)
				h.dbFail(w, r, "record the sign-in in the audit trail", err)
				return
			}
			h.auth.setCookie(w, r, c.newSession)
		}
		r = r.WithContext(context.WithValue(r.Context(), whoKey{}, c))
	}
	h.mux.ServeHTTP(w, r)
}

// public reports whether path is served without a credential: the
// sign-in form, the sign-out and the style sheet.
func public(path string) bool {
	return path == "/ui/signin" || path == "/ui/signout" || strings.HasPrefix(path, "/ui/static/")
}

// askSignIn answers a request without the credential: 401 with the
// sign-in form, which returns to the page asked for.
func (h *Handler) askSignIn(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="inboxd"`)
	next := ""
	if r.Method == http.MethodGet {
		next = r.URL.RequestURI()
	}
	h.render(w, r, http.StatusUnauthorized, "signin", "Sign in", h.auth.signinPage("sign in first: every page of this console needs a credential", next))
}

// setCookie sets the cookie of the session id.
func (a *auth) setCookie(w http.ResponseWriter, r *http.Request, id string) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(a.ttl.Seconds())})
}

// page is what every page's layout reads.
type page struct {
	Title string
	// Enabled is true when a token is configured (every page needs it,
	// actions are possible).
	Enabled bool
	// CanAct is true when the request may act on rows and routes (an
	// operator or an admin), Admin when it may do what only an admin may;
	// Signed is true when it carries a credential. User names who, Role
	// says what they are.
	CanAct, Admin, Signed bool
	User, Role            string
	// CSRF is the token every action form carries.
	CSRF string
	// Remaps is true when rejected rows can be requeued (re-mapped).
	Remaps bool
	// Refresh is how often, in seconds, the page's live parts are fetched
	// again (static/refresh.js); 0: never.
	Refresh int
	// Data is the page's own.
	Data any
}

// refreshEvery is how often each page that refreshes itself does, in
// seconds.
var refreshEvery = map[string]int{"overview": 5, "rows": 5, "blocked": 10, "throughput": 30}

// render writes the page name with data, status code.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, code int, name, title string, data any) {
	c := whoOf(r)
	p := page{Title: title, Enabled: h.auth.enabled(), CanAct: c.can(RoleOperator), Admin: c.can(RoleAdmin),
		Signed: c.ok, User: c.user, Role: c.role.String(), CSRF: c.csrf,
		Remaps: h.cfg.Remap != nil, Refresh: refreshEvery[name], Data: data}
	var b strings.Builder
	if err := h.pages[name].Execute(&b, p); err != nil {
		h.log.Error().Err(err).Str("page", name).Msg("render page")
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// fail renders the error page with code and msg (no internal detail but
// what msg says).
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	h.render(w, r, code, "error", http.StatusText(code), msg)
}

// dbFail logs err and renders a 500 naming what failed.
func (h *Handler) dbFail(w http.ResponseWriter, r *http.Request, what string, err error) {
	h.log.Error().Err(err).Str("path", r.URL.Path).Msg(what)
	h.fail(w, r, http.StatusInternalServerError, what+" failed; see the log")
}
