package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/ops"
)

// action wraps an action's handler: without a token configured it answers
// 403, without a credential 401 (the console's gate has checked it), and
// a cookie session's POST without its CSRF token 403.
func (h *Handler) action(fn func(w http.ResponseWriter, r *http.Request, c who)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.auth.enabled() {
			h.fail(w, r, http.StatusForbidden, readOnly)
			return
		}
		c := whoOf(r)
		if !c.ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="inboxd"`)
			h.fail(w, r, http.StatusUnauthorized, "sign in first: this action needs the console's token")
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

// change is a requeue or a discard: what the dry-run and the result pages
// show.
type change struct {
	// Verb is "requeue" or "discard".
	Verb   string
	Filter filterForm
	// ID is the one row changed, 0 for the filtered set.
	ID int64
	// Count is how many rows the dry run matched, or the action changed.
	Count int64
	// Done is true on the result page.
	Done bool
	// Back is where the page links back to.
	Back string
}

// selection reads the rows an action is on: the one row ?id=, or the
// filter.
func (h *Handler) selection(r *http.Request) (change, driver.FailedFilter, error) {
	ff, f, err := readFilter(r.PostForm, h.cfg.Now())
	if err != nil {
		return change{}, f, err
	}
	c := change{Filter: ff, Back: "/ui/rows?" + ff.query().Encode()}
	if s := r.PostFormValue("id"); s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 {
			return c, f, fmt.Errorf("not a row id: %q", s)
		}
		c.ID = id
		c.Back = fmt.Sprintf("/ui/rows/%d", id)
		f = driver.FailedFilter{Status: f.Status, IDs: []int64{id}}
	}
	return c, f, nil
}

// operator is who acts through the console: the signed-in user, from
// the request's address.
func operator(r *http.Request, c who) ops.Operator {
	return ops.Operator{Name: c.user, From: "console " + r.RemoteAddr}
}

// runChange is a requeue or discard: without confirm=yes, the dry-run page
// with the count and the confirm form; with it, the change, batch after
// batch, and the result page. do is the ops action (each writes its audit
// entry).
func (h *Handler) runChange(w http.ResponseWriter, r *http.Request, c who, verb string,
	do func(ctx context.Context, req ops.Request) (ops.Result, error)) {
	ch, f, err := h.selection(r)
	ch.Verb = verb
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	req := ops.Request{Operator: operator(r, c), DryRun: r.PostFormValue("confirm") != "yes",
		Filter: ops.Filter{Status: f.Status, IDs: f.IDs, EventType: f.EventType, Source: f.Source, Error: f.Error, Since: f.Since, Until: f.Until}}
	res, err := do(r.Context(), req)
	title := strings.ToUpper(verb[:1]) + verb[1:]
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
		h.log.Warn().Err(err).Msg("wake the workers after a requeue (they find the rows at their next poll)")
		err = nil
	}
	if err != nil {
		h.dbFail(w, r, fmt.Sprintf("%s (stopped after %d rows, which stay done; run it again for the rest)", verb, res.Rows), err)
		return
	}
	ch.Count, ch.Done = res.Rows, true
	h.render(w, r, http.StatusOK, "confirm", title+": done", ch)
}

// requeue hands dead rows back to the workers, and re-maps rejected rows
// with the daemon's mapping settings (Config.Remap), row by row as `inboxd
// requeue --status rejected` does: the dry run counts the rows that would
// map to a storable event now.
func (h *Handler) requeue(w http.ResponseWriter, r *http.Request, c who) {
	if st := r.PostFormValue("status"); st == string(status.Rejected) {
		if h.cfg.Remap == nil {
			h.fail(w, r, http.StatusBadRequest, "this console does not re-map rejected rows; use `inboxd requeue --status rejected`")
			return
		}
	} else if st != "" && st != string(status.Dead) {
		h.fail(w, r, http.StatusBadRequest, "requeue takes dead or rejected rows")
		return
	}
	h.runChange(w, r, c, "requeue", h.ops.Requeue)
}

// discard deletes dead or rejected rows; deleting a dead row unparks the
// rows behind it on an ordered route, in the batch's transaction.
func (h *Handler) discard(w http.ResponseWriter, r *http.Request, c who) {
	h.runChange(w, r, c, "discard", h.ops.Discard)
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
