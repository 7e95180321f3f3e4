package console

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/ops"
)

// listForm is a list's view and filter as the form and the query string
// carry them.
type listForm struct {
	View                                   string
	Type, Source, Key, Error, Since, Until string
}

// The list fields of a query or a form, in the order the filter form
// shows them.
var listFields = []string{"type", "source", "key", "error", "since", "until"}

// get returns the field named name.
func (lf *listForm) field(name string) *string {
	switch name {
	case "type":
		return &lf.Type
	case "source":
		return &lf.Source
	case "key":
		return &lf.Key
	case "error":
		return &lf.Error
	case "since":
		return &lf.Since
	case "until":
		return &lf.Until
	}
	return nil
}

// viewStatus is the status of each view's rows, which its actions take.
var viewStatus = map[ops.View]status.Status{
	ops.ViewRetrying: status.Received, ops.ViewWaiting: status.Received, ops.ViewProcessing: status.Processing,
	ops.ViewProcessed: status.Processed, ops.ViewDead: status.Dead, ops.ViewRejected: status.Rejected,
}

// readList reads the view and filter of a GET query or a POST form: view
// (status= is read as the view of that status, dead when neither is
// given), type, source, key, error, since and until (RFC 3339, or a
// duration meaning that long ago).
func readList(v url.Values, now time.Time) (listForm, ops.View, ops.Filter, error) {
	lf := listForm{View: strings.TrimSpace(v.Get("view"))}
	for _, n := range listFields {
		*lf.field(n) = strings.TrimSpace(v.Get(n))
	}
	lf.Error = v.Get("error") // a piece of an error, spaces and all
	if lf.View == "" {
		// An older link's, or a row page's form's: the status's view.
		switch st := v.Get("status"); st {
		case string(status.Received):
			lf.View = string(ops.ViewWaiting)
		default:
			lf.View = st
		}
	}
	if lf.View == "" {
		lf.View = string(ops.ViewDead)
	}
	view, err := ops.ParseView(lf.View)
	if err != nil {
		return lf, "", ops.Filter{}, err
	}
	f := ops.Filter{EventType: lf.Type, Source: lf.Source, Error: lf.Error}
	if lf.Key != "" {
		f.Key = []byte(lf.Key)
	}
	for _, b := range []struct {
		name, s string
		to      **time.Time
	}{{"since", lf.Since, &f.Since}, {"until", lf.Until, &f.Until}} {
		if b.s == "" {
			continue
		}
		t, err := parseSince(b.s, now)
		if err != nil {
			return lf, view, f, fmt.Errorf("%s: %w", b.name, err)
		}
		*b.to = &t
	}
	return lf, view, f, nil
}

// query renders the list back as a query string.
func (lf listForm) query() url.Values {
	v := url.Values{"view": {lf.View}}
	for _, n := range listFields {
		if x := *lf.field(n); x != "" {
			v.Set(n, x)
		}
	}
	return v
}

// URL is the list's page.
func (lf listForm) URL() string { return "/ui/rows?" + lf.query().Encode() }

// Any reports whether the filter has a condition besides the view.
func (lf listForm) Any() bool {
	for _, n := range listFields {
		if *lf.field(n) != "" {
			return true
		}
	}
	return false
}

// Hidden are the filter's fields as an action form carries them.
func (lf listForm) Hidden() []hidden {
	out := []hidden{{"view", lf.View}}
	for _, n := range listFields {
		if x := *lf.field(n); x != "" {
			out = append(out, hidden{n, x})
		}
	}
	return out
}

// hidden is a hidden field of a form.
type hidden struct{ Name, Value string }

// verbs are the actions a view's rows take, in the order its buttons show
// them.
var viewVerbs = map[ops.View][]string{
	ops.ViewRetrying:   {"retry", "cancel", "discard"},
	ops.ViewWaiting:    {"cancel", "discard"},
	ops.ViewProcessing: {"cancel"},
	ops.ViewDead:       {"requeue", "discard"},
	ops.ViewRejected:   {"requeue", "discard"},
}

// rowsData is the list page's.
type rowsData struct {
	Filter listForm
	View   string
	// Views are the views, for the tabs.
	Views []string
	// Status is the view's rows' status, which its actions take.
	Status string
	Rows   []ops.Row
	// Verbs are the actions on the view's rows; Reason is true when one
	// of them asks why (cancel).
	Verbs  []string
	Reason bool
	// Next is the next page's query; "" on the last. First the first
	// page's, on a later page.
	Next, First string
	Now         time.Time
}

// rows renders a page of a view with its filter, in the view's order,
// paged by its keyset (?after=).
func (h *Handler) rows(w http.ResponseWriter, r *http.Request) {
	lf, view, f, err := readList(r.URL.Query(), h.cfg.Now())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	after := r.URL.Query().Get("after")
	page, err := h.ops.List(r.Context(), ops.ListQuery{View: view, Filter: f, After: after, Limit: pageSize})
	if err != nil {
		if strings.Contains(err.Error(), "cursor") {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		h.dbFail(w, r, "list the rows", err)
		return
	}
	d := rowsData{Filter: lf, View: string(view), Status: string(viewStatus[view]), Rows: page.Rows, Now: h.cfg.Now()}
	for _, v := range ops.Views() {
		d.Views = append(d.Views, string(v))
	}
	for _, v := range viewVerbs[view] {
		if v == "requeue" && view == ops.ViewRejected && h.cfg.Remap == nil {
			continue
		}
		d.Verbs = append(d.Verbs, v)
		d.Reason = d.Reason || v == "cancel"
	}
	if after != "" {
		d.First = lf.URL()
	}
	if page.Next != "" {
		q := lf.query()
		q.Set("after", page.Next)
		d.Next = "/ui/rows?" + q.Encode()
	}
	h.render(w, r, http.StatusOK, "rows", strings.ToUpper(d.View[:1])+d.View[1:]+" rows", d)
}

// auditData is the audit trail's page.
type auditData struct {
	Operator, Action, Since string
	Entries                 []ops.AuditEntry
	// Dry shows the dry runs too.
	Dry        bool
	Next, More string
}

// audit lists the audit trail, newest first, by operator, action and
// time, paged by id (?before=); dry runs only when asked (?dry=1).
func (h *Handler) audit(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	d := auditData{Operator: strings.TrimSpace(v.Get("operator")), Action: strings.TrimSpace(v.Get("action")),
		Since: strings.TrimSpace(v.Get("since")), Dry: v.Get("dry") != ""}
	q := ops.AuditQuery{Operator: d.Operator, Action: d.Action, Limit: pageSize + 1}
	if d.Since != "" {
		t, err := parseSince(d.Since, h.cfg.Now())
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		q.Since = &t
	}
	if b := v.Get("before"); b != "" {
		if _, err := fmt.Sscan(b, &q.Before); err != nil || q.Before < 1 {
			h.fail(w, r, http.StatusBadRequest, "before: not an entry id")
			return
		}
	}
	// Dry runs are skipped here, not in the statement: a page may come out
	// short, and the next one goes on below it.
	list, err := h.ops.Audit(r.Context(), q)
	if err != nil {
		h.dbFail(w, r, "read the audit trail", err)
		return
	}
	if len(list) > pageSize {
		list = list[:pageSize]
		next := url.Values{}
		for k, x := range map[string]string{"operator": d.Operator, "action": d.Action, "since": d.Since} {
			if x != "" {
				next.Set(k, x)
			}
		}
		if d.Dry {
			next.Set("dry", "1")
		}
		next.Set("before", fmt.Sprint(list[len(list)-1].ID))
		d.Next = "/ui/audit?" + next.Encode()
	}
	for _, e := range list {
		if d.Dry || !e.DryRun {
			d.Entries = append(d.Entries, e)
		}
	}
	h.render(w, r, http.StatusOK, "audit", "Audit trail", d)
}

// windows are the throughput page's windows: how many slots of what
// length.
var windows = map[ops.Window]struct {
	slots int
	slot  time.Duration
}{ops.WindowHour: {60, time.Minute}, ops.WindowDay: {24, time.Hour}, ops.WindowWeek: {168, time.Hour}}

// throughputData is the throughput page's.
type throughputData struct {
	Window, Route string
	Windows       []string
	Routes        []routeSeries
}

// routeSeries is one route's figures and charts.
type routeSeries struct {
	ops.Series
	Chart template.HTML
}

// throughput shows each route's (or one route's) rows processed and
// failed and their p50 and p99 latency over the last hour, day or week,
// from the per-route rollup the engine's maintenance writes.
func (h *Handler) throughput(w http.ResponseWriter, r *http.Request) {
	d := throughputData{Window: r.URL.Query().Get("window"), Route: strings.TrimSpace(r.URL.Query().Get("route"))}
	if d.Window == "" {
		d.Window = string(ops.WindowHour)
	}
	win, ok := windows[ops.Window(d.Window)]
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "window: hour, day or week")
		return
	}
	d.Windows = []string{string(ops.WindowHour), string(ops.WindowDay), string(ops.WindowWeek)}
	series, err := h.ops.Throughput(r.Context(), ops.Window(d.Window), d.Route)
	if err != nil {
		h.dbFail(w, r, "read the throughput", err)
		return
	}
	end := h.cfg.Now().UTC().Truncate(win.slot).Add(win.slot)
	for _, s := range series {
		d.Routes = append(d.Routes, routeSeries{Series: s, Chart: seriesCharts(s, win.slots, win.slot, end)})
	}
	h.render(w, r, http.StatusOK, "throughput", "Throughput", d)
}
