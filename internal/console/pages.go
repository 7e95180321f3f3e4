package console

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/ops"
	"github.com/inboxd/inboxd/internal/sensitive"
)

// pageSize is how many rows a list page shows.
const pageSize = 50

// funcs are the templates' functions.
var funcs = template.FuncMap{
	"dict2": func(route string, paused bool, csrf string) pauseForm {
		return pauseForm{Route: route, Paused: paused, CSRF: csrf}
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	},
	"utc": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"dur": func(d time.Duration) string { return d.Round(time.Second).String() },
	"ms": func(d time.Duration) string {
		if d < time.Second {
			return d.Round(time.Millisecond).String()
		}
		return d.Round(10 * time.Millisecond).String()
	},
	// class turns a word or phrase ("lease expired") into one CSS class.
	"class": func(s string) string { return strings.Join(strings.Fields(s), "-") },
	"verb":  func(v string) string { return verbText[v].Button },
	"since": func(from, to time.Time) time.Duration { return to.Sub(from) },
	"short": func(s string) string {
		s = strings.Join(strings.Fields(s), " ")
		if utf8.RuneCountInString(s) > 120 {
			return string([]rune(s)[:120]) + "…"
		}
		return s
	},
	// exactLimit is how many dead (rejected) rows the overview counts one
	// by one: above it, their count is an estimate, shown "≈N".
	"exactLimit": func() int { return driver.ExactCountLimit },
}

// pauseForm is what the pause or resume button of a route needs.
type pauseForm struct {
	Route  string
	Paused bool
	CSRF   string
}

// overviewData is the overview page's.
type overviewData struct {
	Stats      driver.Stats
	StaleAfter time.Duration
	Outbox     *driver.OutboxStats
	Paused     []driver.PausedRoute
	Limits     []ops.RouteLimit
	// LimitsFailed says the limits could not be read (see the log).
	LimitsFailed bool
	Local        bool
	Routes       []routeRow
	Lag          []PartitionLag
	Chart        template.HTML
	Processed    int64
	Died         int64
}

// routeRow is one route on the overview: this replica's figures, when
// known, and whether it is paused.
type routeRow struct {
	RouteState
	Paused   bool
	PausedBy string
	Reason   string
}

// overview renders the overview: rows by status, stale rows, routes,
// throughput and lag.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	st, err := driver.ReadStats(ctx, h.cfg.DB, h.cfg.StaleAfter)
	if err != nil {
		h.dbFail(w, r, "read the inbox's figures", err)
		return
	}
	d := overviewData{Stats: st, StaleAfter: h.cfg.StaleAfter}
	if os, err := driver.ReadOutboxStats(ctx, h.cfg.DB); err == nil {
		d.Outbox = &os
	} // no outbox table (an old schema): shown as absent
	if d.Paused, err = driver.PausedRoutes(ctx, h.cfg.DB); err != nil {
		h.dbFail(w, r, "read the paused routes", err)
		return
	}
	if d.Limits, err = h.ops.Limits().List(ctx); err != nil {
		// A routes file that cannot be read now (it was when the daemon
		// started) leaves the rest of the overview standing.
		h.log.Warn().Err(err).Msg("read the routes' rate limits and breakers")
		d.LimitsFailed = true
	}
	paused := map[string]driver.PausedRoute{}
	for _, p := range d.Paused {
		paused[p.Route] = p
	}
	if h.cfg.Local != nil {
		d.Local = true
		for _, rs := range h.cfg.Local.Routes() {
			row := routeRow{RouteState: rs}
			name := driverRoute(rs.Route)
			if p, ok := paused[name]; ok {
				row.Paused, row.PausedBy, row.Reason = true, p.PausedBy, p.Reason
			}
			row.Route = name
			d.Routes = append(d.Routes, row)
		}
		d.Lag = h.cfg.Local.IngestLag()
	}
	mins, err := driver.Throughput(ctx, h.cfg.DB)
	if err != nil {
		h.dbFail(w, r, "read the throughput", err)
		return
	}
	for _, m := range mins {
		d.Processed += m.Processed
		d.Died += m.Dead
	}
	d.Chart = chart(mins, h.cfg.Now())
	h.render(w, r, http.StatusOK, "overview", "Overview", d)
}

// parseSince reads a time as the CLI's --since does: RFC 3339, or a Go
// duration meaning that long ago; the form's datetime-local (UTC) too.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02T15:04", s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("since: %q is neither an RFC 3339 time nor a duration (90m, 24h)", s)
	}
	return now.Add(-d), nil
}

// field is one column of a row as the row page shows it.
type field struct {
	Name, Value string
	// Pre is true for values shown as preformatted text.
	Pre bool
}

// rowData is the row page's.
type rowData struct {
	ID     int64
	Status string
	// Summary is what an operator reads first: the row's state, route,
	// attempts and error, in that order; Source the source's own metadata
	// (the Kafka coordinates of a Kafka row, none for the others, whose
	// metadata is in their headers); Headers the headers, credential-like
	// values masked; Other any column the console does not know (a newer
	// schema's).
	Summary, Source, Other []field
	Headers                string
	// Payload is the payload as text (or hex); Hidden when payloads are not
	// shown.
	Payload       string
	PayloadHex    bool
	PayloadHidden bool
	PayloadSize   int
	// Held is the rows the row's key holds back: listed (Blocks) only for
	// a dead row of a route whose dead rows block their key.
	Held   []driver.FailedRow
	Blocks bool
	// Timeline is the row's recorded attempts, oldest first.
	Timeline []ops.Attempt
	// Verbs are the actions the row takes, by its status; Reason is true
	// when one of them asks why (cancel).
	Verbs  []string
	Reason bool
}

// rowVerbs are the actions a row of each status takes: a received row is
// retried now only when it waits out a backoff (it has failed, and is
// not parked behind its key), a rejected one requeued only when the
// console re-maps (remaps).
func rowVerbs(st status.Status, attempts int64, parked, remaps bool) []string {
	switch st {
	case status.Dead:
		return []string{"requeue", "discard"}
	case status.Rejected:
		if !remaps {
			return []string{"discard"}
		}
		return []string{"requeue", "discard"}
	case status.Received:
		if attempts > 0 && !parked {
			return []string{"retry", "cancel", "discard"}
		}
		return []string{"cancel", "discard"}
	case status.Processing:
		return []string{"cancel"}
	}
	return nil
}

// The columns of a row the row page shows, by where: the summary in this
// order (the lease's only while a worker holds the row); the source's own
// metadata; the columns of the engine's bookkeeping, of no use to an
// operator, not at all.
var (
	summaryCols = []string{"status", "event_type", "source", "event_id", "key", "attempts", "last_error",
		"available_at", "received_at", "processed_at", "updated_at", "locked_by", "lease_expires_at"}
	leaseCols  = map[string]bool{"locked_by": true, "lease_expires_at": true}
	sourceCols = map[string]bool{"kafka_topic": true, "kafka_partition": true, "kafka_offset": true}
	hiddenCols = map[string]bool{"id": true, "lease_token": true, "started": true, "runs_ordered": true, "claim_pos": true,
		"payload": true, "headers": true}
)

// row renders one row: its summary, the source's metadata, its headers
// (masked), the payload behind a click, and, for a dead row that blocks
// its key, the rows it holds back.
func (h *Handler) row(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		h.fail(w, r, http.StatusBadRequest, "not a row id")
		return
	}
	cols, ok, err := driver.ShowRow(r.Context(), h.cfg.DB, id)
	if err != nil {
		h.dbFail(w, r, "read the row", err)
		return
	}
	if !ok {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no row %d", id))
		return
	}
	d := rowData{ID: id, PayloadHidden: !h.cfg.ShowPayloads}
	byName := map[string]driver.Column{}
	for _, c := range cols {
		byName[c.Name] = c
		switch c.Name {
		case "payload":
			b, _ := c.Value.([]byte)
			d.PayloadSize = len(b)
			if h.cfg.ShowPayloads {
				if utf8.Valid(b) {
					d.Payload = string(b)
				} else {
					d.Payload, d.PayloadHex = hex.Dump(b), true
				}
			}
		case "headers":
			b, _ := json.MarshalIndent(sensitive.MaskHeaders(c.Value), "", "  ")
			d.Headers = string(b)
		}
	}
	d.Status = fmt.Sprint(byName["status"].Value)
	st := status.Status(d.Status)
	known := map[string]bool{}
	for _, n := range summaryCols {
		known[n] = true
		c, ok := byName[n]
		if !ok || (leaseCols[n] && st != status.Processing) || (n == "processed_at" && c.Value == nil) {
			continue
		}
		d.Summary = append(d.Summary, showValue(c))
	}
	for _, c := range cols {
		switch {
		case known[c.Name] || hiddenCols[c.Name]:
		case sourceCols[c.Name]:
			if c.Value != nil { // a Kafka row's: NULL on every other source's
				d.Source = append(d.Source, showValue(c))
			}
		default:
			d.Other = append(d.Other, showValue(c))
		}
	}
	attempts, _ := byName["attempts"].Value.(int32)
	due, _ := byName["available_at"].Value.(time.Time)
	d.Verbs = rowVerbs(st, int64(attempts), driver.ListedRow{AvailableAt: due}.Parked(), h.cfg.Remap != nil)
	d.Reason = slices.Contains(d.Verbs, "cancel")
	d.Blocks = st == status.Dead && byName["key"].Value != nil && slices.Contains(typesOf(h.cfg.BlockingTypes), fmt.Sprint(byName["event_type"].Value))
	if d.Blocks {
		if d.Held, err = driver.KeyHeld(r.Context(), h.cfg.DB, id, pageSize); err != nil {
			h.dbFail(w, r, "read the rows behind the row", err)
			return
		}
	}
	if d.Timeline, err = h.ops.History(r.Context(), id); err != nil {
		h.dbFail(w, r, "read the row's attempts", err)
		return
	}
	h.render(w, r, http.StatusOK, "row", fmt.Sprintf("Row %d", id), d)
}

// showValue renders a column for the row page.
func showValue(c driver.Column) field {
	switch v := c.Value.(type) {
	case nil:
		return field{Name: c.Name, Value: "NULL"}
	case time.Time:
		return field{Name: c.Name, Value: v.UTC().Format(time.RFC3339Nano)}
	case []byte:
		if utf8.Valid(v) {
			return field{Name: c.Name, Value: string(v), Pre: true}
		}
		return field{Name: c.Name, Value: "hex " + hex.EncodeToString(v), Pre: true}
	case map[string]any, []any:
		b, _ := json.MarshalIndent(v, "", "  ")
		return field{Name: c.Name, Value: string(b), Pre: true}
	case string:
		return field{Name: c.Name, Value: v, Pre: strings.Contains(v, "\n") || len(v) > 80}
	}
	return field{Name: c.Name, Value: fmt.Sprint(c.Value)}
}

// searchData is the search page's.
type searchData struct {
	EventID string
	Rows    []driver.FailedRow
	Done    bool
}

// search finds the rows of an event id in every source.
func (h *Handler) search(w http.ResponseWriter, r *http.Request) {
	d := searchData{EventID: strings.TrimSpace(r.URL.Query().Get("event_id"))}
	if d.EventID != "" {
		var err error
		if d.Rows, err = driver.FindEvent(r.Context(), h.cfg.DB, d.EventID); err != nil {
			h.dbFail(w, r, "search", err)
			return
		}
		d.Done = true
		if len(d.Rows) == 1 && r.URL.Query().Get("list") == "" {
			http.Redirect(w, r, fmt.Sprintf("/ui/rows/%d", d.Rows[0].ID), http.StatusSeeOther)
			return
		}
	}
	h.render(w, r, http.StatusOK, "search", "Search", d)
}

// blockedData is the blocked keys page's: the keys held back by a dead
// head (Keys, paged), and on the first page those held back by a failing
// one (Failing).
type blockedData struct {
	Keys    []driver.BlockedKey
	Next    string
	Failing []driver.FailingHead
	First   bool
}

// typesOf is the answer of types (a Config.BlockingTypes or
// OrderedTypes), never nil.
func typesOf(types func() []string) []string {
	if types == nil {
		return []string{}
	}
	return append([]string{}, types()...)
}

// blocked lists the keys of ordered routes held back by a dead head, with
// the head and how many rows wait behind it: as many keys as
// inboxd_ordered_blocked_keys counts.
func (h *Handler) blocked(w http.ResponseWriter, r *http.Request) {
	before, _ := strconv.ParseInt(r.URL.Query().Get("before"), 10, 64)
	keys, err := driver.BlockedKeyList(r.Context(), h.cfg.DB, typesOf(h.cfg.BlockingTypes), before, pageSize+1)
	if err != nil {
		h.dbFail(w, r, "list the blocked keys", err)
		return
	}
	d := blockedData{Keys: keys, First: before <= 0}
	if d.First && h.cfg.OrderedTypes != nil {
		if d.Failing, err = driver.FailingHeads(r.Context(), h.cfg.DB, typesOf(h.cfg.OrderedTypes), pageSize); err != nil {
			h.dbFail(w, r, "list the keys held back by a failing head", err)
			return
		}
	}
	if len(keys) > pageSize {
		d.Keys = keys[:pageSize]
		d.Next = fmt.Sprintf("/ui/blocked?before=%d", d.Keys[pageSize-1].ID)
	}
	h.render(w, r, http.StatusOK, "blocked", "Blocked keys", d)
}

// signinData is the sign-in page's: an error to show, where to go once
// signed in, whether the form takes a token (Tokens) that names its
// operator (Named), and whether a proxy signs operators in.
type signinData struct {
	Error, Next          string
	Tokens, Named, Proxy bool
}

// signinPage is the sign-in page's data with msg and next.
func (a *auth) signinPage(msg, next string) signinData {
	return signinData{Error: msg, Next: next, Tokens: a.signsIn(), Named: a.named(), Proxy: a.proxy.enabled()}
}

// readOnly is what a read-only console answers to sign-ins and actions.
const readOnly = "the console is read-only: none of INBOXD_UI_USERS_FILE, INBOXD_UI_TOKEN_FILE, INBOXD_UI_PROXY_HEADER is set"

// signinForm renders the sign-in form.
func (h *Handler) signinForm(w http.ResponseWriter, r *http.Request) {
	if !h.auth.enabled() {
		h.fail(w, r, http.StatusForbidden, readOnly)
		return
	}
	h.render(w, r, http.StatusOK, "signin", "Sign in", h.auth.signinPage("", safeNext(r.URL.Query().Get("next"))))
}

// safeNext returns next when it is a path of the console, else "": the
// sign-in form never sends a browser elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return ""
	}
	return next
}

// signin checks the token of the sign-in form and starts a session: a row
// of console_sessions, its id in the cookie. A user's token names them
// (the users file); the shared token takes the name the form gives. At
// most maxSignins forms are read at once (their bodies come before any
// credential); more are answered 503 before theirs is read.
func (h *Handler) signin(w http.ResponseWriter, r *http.Request) {
	if !h.auth.signsIn() {
		h.fail(w, r, http.StatusForbidden, "this console signs operators in through its proxy alone")
		return
	}
	select {
	case h.signins <- struct{}{}:
		defer func() { <-h.signins }()
	default:
		w.Header().Set("Retry-After", "1")
		h.fail(w, r, http.StatusServiceUnavailable, "too many sign-ins at once: try again in a second")
		return
	}
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "the sign-in form could not be read")
		return
	}
	name := strings.TrimSpace(r.PostFormValue("user"))
	next := safeNext(r.PostFormValue("next"))
	if name != "" && !validName(name) {
		h.render(w, r, http.StatusBadRequest, "signin", "Sign in", h.auth.signinPage("a name is letters, digits and . _ @ + - only", next))
		return
	}
	c, ok := h.auth.byToken(r.PostFormValue("token"), name)
	if !ok {
		h.log.Warn().Str("remote", r.RemoteAddr).Msg("console sign-in refused: wrong token")
		h.render(w, r, http.StatusUnauthorized, "signin", "Sign in", h.auth.signinPage("wrong token", next))
		return
	}
	id, err := h.auth.newSession(r.Context(), c)
	if err != nil {
		h.dbFail(w, r, "start a session", err)
		return
	}
	if err := h.ops.Record(r.Context(), operator(r, c), ops.ActSignIn, "as "+c.role.String()+" via "+c.via); err != nil {
		_, _ = h.auth.endSession(context.WithoutCancel(r.Context()), id)
		h.dbFail(w, r, "record the sign-in in the audit trail", err)
		return
	}
	h.auth.setCookie(w, r, id)
	if next == "" {
		next = Prefix
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// signout ends the cookie's session on the server (on every replica: the
// row is marked ended) and drops the cookie; a proxy's user goes on to
// the proxy's own sign-out, when one is configured.
func (h *Handler) signout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil && h.auth.enabled() {
		s, _, _ := h.auth.session(r.Context(), c.Value, "")
		ended, err := h.auth.endSession(r.Context(), c.Value)
		if err != nil {
			h.dbFail(w, r, "end the session", err)
			return
		}
		if ended && s.user != "" {
			if err := h.ops.Record(r.Context(), operator(r, s), ops.ActSignOut, ""); err != nil {
				h.log.Error().Err(err).Str("user", s.user).Msg("console sign-out: the audit trail could not be written (the session is ended)")
			}
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	to := Prefix
	switch {
	case h.auth.proxy.enabled() && h.auth.proxy.trusts(r) && h.auth.proxy.SignOutURL != "":
		to = h.auth.proxy.SignOutURL
	case h.auth.enabled():
		to = "/ui/signin"
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}
