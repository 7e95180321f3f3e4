package console

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
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
			h.fail(w, r, http.StatusForbidden, fmt.Sprintf("%s is a %s: this action needs an %s", c.user, c.role, role))
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

// eachRange calls fn with each range of ids (after, upto] of
// driver.FailedBatch rows of f.Status (only f.IDs when set), in id order,
// and sums what it returns: the batches of the CLI's requeue and discard.
func eachRange(ctx context.Context, db driver.DB, f driver.FailedFilter, fn func(after, upto int64) (int64, error)) (int64, error) {
	var total, after int64
	for {
		upto, ok, err := driver.FailedRangeEnd(ctx, db, f, after, driver.FailedBatch)
		if err != nil || !ok {
			return total, err
		}
		n, err := fn(after, upto)
		total += n
		if err != nil {
			return total, err
		}
		after = upto
	}
}

// dryRun counts the rows f matches now.
func (h *Handler) dryRun(ctx context.Context, f driver.FailedFilter) (int64, error) {
	return eachRange(ctx, h.cfg.DB, f, func(after, upto int64) (int64, error) {
		rows, err := driver.MatchFailed(ctx, h.cfg.DB, f, after, upto)
		return int64(len(rows)), err
	})
}

// logChange writes the line of an action: who, what, the filter and how
// many, never a payload nor the token.
func (h *Handler) logChange(c who, ch change, f driver.FailedFilter, dry bool, n int64, err error) *zerolog.Event {
	ev := h.log.Info()
	if err != nil {
		ev = h.log.Error().Err(err)
	}
	ev = ev.Str("user", c.user).Str("action", ch.Verb).Bool("dry_run", dry).Str("status", string(f.Status)).Int64("rows", n)
	if ch.ID != 0 {
		ev = ev.Int64("id", ch.ID)
	}
	for k, v := range map[string]string{"event_type": f.EventType, "source": f.Source, "error_text": f.Error} {
		if v != "" {
			ev = ev.Str(k, v)
		}
	}
	if f.Since != nil {
		ev = ev.Time("since", *f.Since)
	}
	return ev
}

// runChange is a requeue or discard: without confirm=yes, the dry-run page
// with the count (h.dryRun's, or count's when set) and the confirm form;
// with it, the change, batch after batch, and the result page.
func (h *Handler) runChange(w http.ResponseWriter, r *http.Request, c who, verb string,
	do func(ctx context.Context, f driver.FailedFilter, after, upto int64) (int64, error), after func(ctx context.Context, n int64),
	count func(ctx context.Context, f driver.FailedFilter) (int64, error)) {
	if count == nil {
		count = h.dryRun
	}
	ch, f, err := h.selection(r)
	ch.Verb = verb
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	if ch.ID == 0 && !c.can(RoleAdmin) {
		// An operator's action on a filter: counted first, even at the
		// confirmation, since over the bound it needs an admin.
		n, err := count(ctx, f)
		if err != nil {
			h.dbFail(w, r, verb+" count", err)
			return
		}
		if n > h.cfg.BulkAdminOver {
			h.logChange(c, ch, f, true, n, nil).Msg("console " + verb + " refused: over the bulk bound for an operator")
			h.fail(w, r, http.StatusForbidden, fmt.Sprintf("%s would %s %d rows: over %d rows needs an admin", c.user, verb, n, h.cfg.BulkAdminOver))
			return
		}
	}
	if r.PostFormValue("confirm") != "yes" {
		n, err := count(ctx, f)
		h.logChange(c, ch, f, true, n, err).Msg("console " + verb + " dry run")
		if err != nil {
			h.dbFail(w, r, verb+" dry run", err)
			return
		}
		ch.Count = n
		h.render(w, r, http.StatusOK, "confirm", strings.ToUpper(verb[:1])+verb[1:]+": dry run", ch)
		return
	}
	n, err := eachRange(ctx, h.cfg.DB, f, func(a, u int64) (int64, error) { return do(ctx, f, a, u) })
	if after != nil {
		after(ctx, n)
	}
	h.logChange(c, ch, f, false, n, err).Msg("console " + verb)
	if err != nil {
		h.dbFail(w, r, fmt.Sprintf("%s (stopped after %d rows, which stay done; run it again for the rest)", verb, n), err)
		return
	}
	ch.Count, ch.Done = n, true
	h.render(w, r, http.StatusOK, "confirm", strings.ToUpper(verb[:1])+verb[1:]+": done", ch)
}

// requeue hands dead rows back to the workers, and re-maps rejected rows
// with the daemon's mapping settings (Config.RequeueRejected), row by row as
// `inboxd requeue --status rejected` does: the dry run counts the rows that
// would map to a storable event now.
func (h *Handler) requeue(w http.ResponseWriter, r *http.Request, c who) {
	wake := func(ctx context.Context, n int64) {
		if n > 0 {
			if err := driver.Notify(context.WithoutCancel(ctx), h.cfg.DB); err != nil {
				h.log.Warn().Err(err).Msg("wake the workers after a requeue (they find the rows at their next poll)")
			}
		}
	}
	if st := r.PostFormValue("status"); st == string(status.Rejected) {
		if h.cfg.RequeueRejected == nil {
			h.fail(w, r, http.StatusBadRequest, "this console does not re-map rejected rows; use `inboxd requeue --status rejected`")
			return
		}
		remap := func(dry bool) func(ctx context.Context, f driver.FailedFilter, after, upto int64) (int64, error) {
			return func(ctx context.Context, f driver.FailedFilter, after, upto int64) (int64, error) {
				rows, err := driver.MatchFailed(ctx, h.cfg.DB, f, after, upto)
				if err != nil {
					return 0, err
				}
				var n int64
				for _, row := range rows {
					ok, err := h.cfg.RequeueRejected(ctx, row.ID, dry)
					if err != nil {
						return n, err
					}
					if ok {
						n++
					}
				}
				return n, nil
			}
		}
		h.runChange(w, r, c, "requeue", remap(false), wake, func(ctx context.Context, f driver.FailedFilter) (int64, error) {
			return eachRange(ctx, h.cfg.DB, f, func(a, u int64) (int64, error) { return remap(true)(ctx, f, a, u) })
		})
		return
	} else if st != "" && st != string(status.Dead) {
		h.fail(w, r, http.StatusBadRequest, "requeue takes dead or rejected rows")
		return
	}
	h.runChange(w, r, c, "requeue", func(ctx context.Context, f driver.FailedFilter, after, upto int64) (int64, error) {
		ids, err := driver.RequeueDead(ctx, h.cfg.DB, f, after, upto)
		return int64(len(ids)), err
	}, wake, nil)
}

// discard deletes dead or rejected rows; deleting a dead row unparks the
// rows behind it on an ordered route, in the batch's transaction.
func (h *Handler) discard(w http.ResponseWriter, r *http.Request, c who) {
	h.runChange(w, r, c, "discard", func(ctx context.Context, f driver.FailedFilter, after, upto int64) (int64, error) {
		var n int64
		err := pgx.BeginFunc(ctx, h.cfg.DB, func(tx pgx.Tx) error {
			deleted, err := driver.DiscardFailed(ctx, tx, f, after, upto)
			if err != nil {
				return err
			}
			n = int64(len(deleted))
			if f.Status != status.Dead {
				return nil // rejected rows hold no key back
			}
			return driver.UnparkDeleted(ctx, tx, deleted)
		})
		return n, err
	}, nil, nil)
}

// pause pauses a route on every replica.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request, c who) {
	route := strings.TrimSpace(r.PostFormValue("route"))
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if route == "" {
		h.fail(w, r, http.StatusBadRequest, "say which route (its event type, * for the default route)")
		return
	}
	err := driver.PauseRoute(r.Context(), h.cfg.DB, route, "console: "+c.user, reason)
	ev := h.log.Info()
	if err != nil {
		ev = h.log.Error().Err(err)
	}
	ev.Str("user", c.user).Str("action", "pause").Str("route", route).Str("reason", reason).Msg("console route pause")
	if err != nil {
		h.dbFail(w, r, "pause the route", err)
		return
	}
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// resume resumes a paused route.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, c who) {
	route := strings.TrimSpace(r.PostFormValue("route"))
	was, err := driver.ResumeRoute(r.Context(), h.cfg.DB, route)
	ev := h.log.Info()
	if err != nil {
		ev = h.log.Error().Err(err)
	}
	ev.Str("user", c.user).Str("action", "resume").Str("route", route).Bool("was_paused", was).Msg("console route resume")
	if err != nil {
		h.dbFail(w, r, "resume the route", err)
		return
	}
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}
