package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/ops"
)

// action wraps an action's handler, which needs role: without a
// credential configured it answers 403, without a credential 401 (the
// console's gate has checked it), to a role below role 403, and to a
// cookie session's POST without its CSRF token 403.
func (h *Handler) action(role Role, fn func(w http.ResponseWriter, r *http.Request, c who)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.auth.enabled() {
			h.fail(w, r, http.StatusForbidden, readOnly)
			return
		}
		c := whoOf(r)
		if !c.ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="inboxd"`)
			h.fail(w, r, http.StatusUnauthorized, "sign in first: this action needs a credential")
			return
		}
		if !c.can(role) {
			h.log.Warn().Str("user", c.user).Str("role", c.role.String()).Str("path", r.URL.Path).Msg("console action refused: role")
			h.fail(w, r, http.StatusForbidden, fmt.Sprintf("%s is %s: this action needs %s", c.user, withArticle(c.role.String()), withArticle(role.String())))
			return
		}
		if !c.csrfOK(r) {
			h.log.Warn().Str("user", c.user).Str("path", r.URL.Path).Msg("console action refused: missing or wrong CSRF token")
			h.fail(w, r, http.StatusForbidden, "the form's CSRF token is missing or wrong: reload the page and try again")
			return
		}
		fn(w, r, c)
	}
}

// verbText is how the pages name each action on rows: the button, the
// result ("3 rows ..."), and the ops action it runs.
var verbText = map[string]struct{ Button, Done string }{
	"requeue": {"Requeue", "requeued: the workers take them now"},
	"discard": {"Discard", "discarded (deleted for good)"},
	"cancel":  {"Cancel", "cancelled: dead, with the reason in their last error"},
	"retry":   {"Retry now", "due now: the workers take them"},
}

// verbStatuses are the statuses of the rows each action takes.
var verbStatuses = map[string][]status.Status{
	"requeue": {status.Dead, status.Rejected},
	"discard": {status.Dead, status.Rejected, status.Received},
	"cancel":  {status.Received, status.Processing},
	"retry":   {status.Received},
}

// change is an action on rows: what the dry-run and the result pages
// show.
type change struct {
	Verb, Button, Done string
	// Status is the rows' status.
	Status string
	Filter listForm
	// IDs are the rows ticked (or the row page's one row); nil for the
	// filter's rows.
	IDs []int64
	// Reason is why (cancel).
	Reason string
	// Count is how many rows the dry run matched, or the action changed.
	Count int64
	// Finished is true on the result page.
	Finished bool
	// Back is where the page links back to.
	Back string
}

// Hidden are the fields the confirmation posts again.
func (c change) Hidden() []hidden {
	out := append([]hidden{{"status", c.Status}}, c.Filter.Hidden()...)
	if c.IDs != nil {
		out = append(out, hidden{"scope", "selection"})
		for _, id := range c.IDs {
			out = append(out, hidden{"id", strconv.FormatInt(id, 10)})
		}
	} else {
		out = append(out, hidden{"scope", "filter"})
	}
	if c.Reason != "" {
		out = append(out, hidden{"reason", c.Reason})
	}
	return out
}

// One is the one row the change is on, 0 when it is on more or a filter.
func (c change) One() int64 {
	if len(c.IDs) == 1 {
		return c.IDs[0]
	}
	return 0
}

// readChange reads the rows an action verb is on: the status (status=, or
// the view's), and the rows ticked (scope=selection, or a row page's
// id=) or the view's filter (scope=filter, or no id at all).
func readChange(r *http.Request, verb string, now time.Time) (change, ops.Filter, error) {
	lf, view, f, err := readList(r.PostForm, now)
	if err != nil {
		return change{}, f, err
	}
	st := status.Status(r.PostFormValue("status"))
	if st == "" {
		st = viewStatus[view]
	}
	if !slices.Contains(verbStatuses[verb], st) {
		return change{}, f, fmt.Errorf("%s takes %s rows, not %s ones", verb, statusList(verbStatuses[verb]), st)
	}
	text := verbText[verb]
	c := change{Verb: verb, Button: text.Button, Done: text.Done, Status: string(st), Filter: lf, Back: lf.URL(),
		Reason: strings.TrimSpace(r.PostFormValue("reason"))}
	f.Status = st
	ids, scope := r.PostForm["id"], r.PostFormValue("scope")
	if scope == "filter" || (scope == "" && len(ids) == 0) {
		return c, f, nil
	}
	if len(ids) == 0 {
		return c, f, errors.New("tick the rows to act on first")
	}
	for _, s := range ids {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 {
			return c, f, fmt.Errorf("not a row id: %q", s)
		}
		c.IDs = append(c.IDs, id)
	}
	if len(c.IDs) > maxSelection {
		return c, f, fmt.Errorf("%d rows ticked: at most %d at once (act on the filter for more)", len(c.IDs), maxSelection)
	}
	if len(c.IDs) == 1 && r.PostFormValue("scope") == "" {
		c.Back = fmt.Sprintf("/ui/rows/%d", c.IDs[0]) // the row page's
	}
	f = ops.Filter{Status: st, IDs: c.IDs}
	return c, f, nil
}

// maxSelection bounds the rows ticked in one action: a page's worth, a few
// pages at most.
const maxSelection = 1000

// statusList is sts as a page names them: "dead or rejected".
func statusList(sts []status.Status) string {
	s := make([]string, len(sts))
	for i, st := range sts {
		s[i] = string(st)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// operator is who acts through the console: the signed-in user, from
// the request's address.
func operator(r *http.Request, c who) ops.Operator {
	return ops.Operator{Name: c.user, From: "console " + r.RemoteAddr}
}

// runChange runs the action verb (do, an ops action: each writes its
// audit entry) on the rows the form selects: without confirm=yes, the dry
// run's page with the count and the confirm form; with it, the action,
// batch after batch, and the result page. An operator's action on more
// than Config.BulkAdminOver rows is refused: it needs an admin.
func (h *Handler) runChange(w http.ResponseWriter, r *http.Request, c who, verb string,
	do func(ctx context.Context, req ops.Request) (ops.Result, error)) {
	ch, f, err := readChange(r, verb, h.cfg.Now())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	req := ops.Request{Operator: operator(r, c), DryRun: r.PostFormValue("confirm") != "yes", Filter: f, Reason: ch.Reason}
	title := ch.Button
	if ch.One() == 0 && !c.can(RoleAdmin) {
		// An operator's action on more than one row: its dry run first,
		// even at the confirmation, since over the bound it needs an admin.
		dry := req
		dry.DryRun = true
		res, err := do(r.Context(), dry)
		if err != nil {
			h.dbFail(w, r, verb+" dry run", err)
			return
		}
		if res.Rows > h.cfg.BulkAdminOver {
			h.log.Warn().Str("user", c.user).Str("action", verb).Int64("rows", res.Rows).Int64("bound", h.cfg.BulkAdminOver).
				Msg("console action refused: over the bulk bound for an operator")
			h.fail(w, r, http.StatusForbidden, fmt.Sprintf("%s would %s %d rows: over %d rows needs an admin", c.user, verb, res.Rows, h.cfg.BulkAdminOver))
			return
		}
		if req.DryRun {
			ch.Count = res.Rows
			h.render(w, r, http.StatusOK, "confirm", title+": dry run", ch)
			return
		}
	}
	res, err := do(r.Context(), req)
	if req.DryRun {
		if err != nil {
			h.dbFail(w, r, verb+" dry run", err)
			return
		}
		ch.Count = res.Rows
		h.render(w, r, http.StatusOK, "confirm", title+": dry run", ch)
		return
	}
	var notify *ops.NotifyError
	if errors.As(err, &notify) {
		h.log.Warn().Err(err).Msg("wake the workers after an action (they find the rows at their next poll)")
		err = nil
	}
	if err != nil {
		h.dbFail(w, r, fmt.Sprintf("%s (stopped after %d rows, which stay done; run it again for the rest)", verb, res.Rows), err)
		return
	}
	ch.Count, ch.Finished = res.Rows, true
	h.render(w, r, http.StatusOK, "confirm", title+": done", ch)
}

// requeue hands dead rows back to the workers, and re-maps rejected rows
// with the daemon's mapping settings (Config.Remap), row by row as `inboxd
// requeue --status rejected` does: the dry run counts the rows that would
// map to a storable event now.
func (h *Handler) requeue(w http.ResponseWriter, r *http.Request, c who) {
	if st := r.PostFormValue("status"); (st == string(status.Rejected) || r.PostFormValue("view") == string(ops.ViewRejected)) && h.cfg.Remap == nil {
		h.fail(w, r, http.StatusBadRequest, "this console does not re-map rejected rows; use `inboxd requeue --status rejected`")
		return
	}
	h.runChange(w, r, c, "requeue", h.ops.Requeue)
}

// discard deletes dead, rejected or received rows; deleting a dead row
// unparks the rows behind it on an ordered route, in the batch's
// transaction.
func (h *Handler) discard(w http.ResponseWriter, r *http.Request, c who) {
	h.runChange(w, r, c, "discard", h.ops.Discard)
}

// cancel moves received or processing rows to dead, "cancelled by <name>:
// <reason>"; a processing row's worker is fenced out.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, c who) {
	h.runChange(w, r, c, "cancel", h.ops.Cancel)
}

// retryNow makes received rows waiting out a backoff due now.
func (h *Handler) retryNow(w http.ResponseWriter, r *http.Request, c who) {
	h.runChange(w, r, c, "retry", h.ops.RetryNow)
}

// pause pauses a route on every replica.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request, c who) {
	route := strings.TrimSpace(r.PostFormValue("route"))
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if route == "" {
		h.fail(w, r, http.StatusBadRequest, "say which route (its event type, * for the default route)")
		return
	}
	if _, err := h.ops.Pause(r.Context(), operator(r, c), route, reason); errors.Is(err, ops.ErrUnknownRoute) {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	} else if err != nil {
		h.dbFail(w, r, "pause the route", err)
		return
	}
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// resume resumes a paused route.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, c who) {
	route := strings.TrimSpace(r.PostFormValue("route"))
	if _, err := h.ops.Resume(r.Context(), operator(r, c), route); err != nil && !errors.Is(err, ops.ErrNotPaused) {
		h.dbFail(w, r, "resume the route", err)
		return
	}
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// rate sets a route's rate override (rate, rows a second, and burst,
// empty: one second's worth) or, with clear=yes, clears it: an admin's.
func (h *Handler) rate(w http.ResponseWriter, r *http.Request, c who) {
	route := strings.TrimSpace(r.PostFormValue("route"))
	if route == "" {
		h.fail(w, r, http.StatusBadRequest, "say which route (its event type, * for the default route)")
		return
	}
	if r.PostFormValue("clear") == "yes" {
		if _, err := h.ops.Limits().ClearRate(r.Context(), operator(r, c), route); err != nil && !errors.Is(err, ops.ErrNoOverride) {
			h.dbFail(w, r, "clear the route's rate", err)
			return
		}
		http.Redirect(w, r, Prefix+"#limits", http.StatusSeeOther)
		return
	}
	perSecond, err := strconv.ParseFloat(strings.TrimSpace(r.PostFormValue("rate")), 64)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("the rate must be a number of rows a second, got %q", r.PostFormValue("rate")))
		return
	}
	burst := 0
	if s := strings.TrimSpace(r.PostFormValue("burst")); s != "" {
		if burst, err = strconv.Atoi(s); err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("the burst must be a whole number of rows, got %q", s))
			return
		}
	}
	if _, err := h.ops.Limits().SetRate(r.Context(), operator(r, c), route, perSecond, burst); errors.Is(err, ops.ErrBadLimit) || errors.Is(err, ops.ErrUnknownRoute) {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	} else if err != nil {
		h.dbFail(w, r, "set the route's rate", err)
		return
	}
	http.Redirect(w, r, Prefix+"#limits", http.StatusSeeOther)
}

// resetBreaker resets a route's circuit breaker: an admin's.
func (h *Handler) resetBreaker(w http.ResponseWriter, r *http.Request, c who) {
	route := strings.TrimSpace(r.PostFormValue("route"))
	if route == "" {
		h.fail(w, r, http.StatusBadRequest, "say which route (its event type, * for the default route)")
		return
	}
	if _, err := h.ops.Limits().ResetBreaker(r.Context(), operator(r, c), route); errors.Is(err, ops.ErrNoBreaker) || errors.Is(err, ops.ErrUnknownRoute) {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	} else if err != nil {
		h.dbFail(w, r, "reset the route's breaker", err)
		return
	}
	http.Redirect(w, r, Prefix+"#limits", http.StatusSeeOther)
}

// withArticle puts "a" or "an" before a role's name ("a viewer", "an operator").
func withArticle(name string) string {
	if name != "" && strings.ContainsRune("aeiou", rune(name[0])) {
		return "an " + name
	}
	return "a " + name
}
