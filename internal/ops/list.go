package ops

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
)

// View is a list of rows an operator reads: retrying, waiting,
// processing, processed, dead, rejected.
type View = driver.ListView

// The views (see driver.ListView).
const (
	ViewRetrying   = driver.ViewRetrying
	ViewWaiting    = driver.ViewWaiting
	ViewProcessing = driver.ViewProcessing
	ViewProcessed  = driver.ViewProcessed
	ViewDead       = driver.ViewDead
	ViewRejected   = driver.ViewRejected
)

// Views lists every view in the order an operator reads them.
func Views() []View { return append([]View(nil), driver.Views...) }

// ParseView reads a view's name.
func ParseView(s string) (View, error) {
	for _, v := range driver.Views {
		if string(v) == s {
			return v, nil
		}
	}
	names := make([]string, len(driver.Views))
	for i, v := range driver.Views {
		names[i] = string(v)
	}
	return "", fmt.Errorf("no list %q: one of %s", s, strings.Join(names, ", "))
}

// ListQuery selects one page of a view.
type ListQuery struct {
	View View
	// Filter narrows it: EventType, Source, Key, Error, Since and Until
	// (Status and IDs are the view's).
	Filter Filter
	// After is the previous page's Page.Next ("" for the first page).
	After string
	// Limit is the page's size (default 50, at most 1,000).
	Limit int
}

// Row is one row of a list, without its payload, with what its view
// shows.
type Row struct {
	driver.ListedRow
	// MaxAttempts is the route's attempt budget (0 when unknown).
	MaxAttempts int
	// RunningFor is how long a processing row has been held by its worker;
	// Took how long a processed row took from received to processed.
	RunningFor, Took time.Duration
	// Behind says what a waiting row waits for: "row N (dead)" for a
	// parked row, "route paused", "" when it is due.
	Behind string
}

// Page is one page of a list.
type Page struct {
	Rows []Row
	// Next is the cursor of the next page ("" when this is the last).
	Next string
}

// List returns one page of q.View, in the view's order: retrying by next
// attempt, waiting by due time (parked rows last), processing by lease
// expiry, processed most recent first, dead and rejected newest first.
// It reads the partial index of the view's status, never counting the
// table.
func (o *Ops) List(ctx context.Context, q ListQuery) (Page, error) {
	if q.Limit < 1 {
		q.Limit = 50
	}
	if q.Limit > 1000 {
		q.Limit = 1000
	}
	at, id, err := parseCursor(q.After)
	if err != nil {
		return Page{}, err
	}
	f := q.Filter.driver()
	f.IDs, f.Status = nil, ""
	rows, err := driver.ListRows(ctx, o.cfg.DB, driver.ListQuery{View: q.View, Filter: f, AfterAt: at, AfterID: id, Limit: q.Limit + 1,
		Lease: o.cfg.Lease})
	if err != nil {
		return Page{}, err
	}
	var p Page
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
		last := rows[len(rows)-1]
		p.Next = cursor(last.OrderAt, last.ID)
	}
	now := time.Now()
	p.Rows = make([]Row, len(rows))
	for i, r := range rows {
		row := Row{ListedRow: r}
		if o.cfg.MaxAttempts != nil {
			row.MaxAttempts = o.cfg.MaxAttempts(r.EventType)
		}
		switch {
		case r.Status == "processing" || r.LeaseExpiresAt != nil:
			row.RunningFor = now.Sub(r.UpdatedAt)
		case r.ProcessedAt != nil:
			row.Took = r.ProcessedAt.Sub(r.ReceivedAt)
		}
		switch {
		case r.Parked() && r.HeadID != 0:
			row.Behind = fmt.Sprintf("row %d (%s)", r.HeadID, r.HeadStatus)
		case r.Parked():
			row.Behind = "an earlier row of its key (finished: the sweeper unparks it)"
		case r.RoutePaused && r.Status == "received":
			row.Behind = "route paused"
		}
		p.Rows[i] = row
	}
	return p, nil
}

// cursor is a page's keyset as text: microseconds since the epoch and the
// row id.
func cursor(at time.Time, id int64) string {
	return strconv.FormatInt(at.UnixMicro(), 10) + "." + strconv.FormatInt(id, 10)
}

// parseCursor reads a cursor; "" is the start.
func parseCursor(s string) (time.Time, int64, error) {
	if s == "" {
		return time.Time{}, 0, nil
	}
	us, ids, ok := strings.Cut(s, ".")
	u, err1 := strconv.ParseInt(us, 10, 64)
	id, err2 := strconv.ParseInt(ids, 10, 64)
	if !ok || err1 != nil || err2 != nil || id < 1 {
		return time.Time{}, 0, fmt.Errorf("not a page cursor: %q", s)
	}
	return time.UnixMicro(u).UTC(), id, nil
}

// Attempt is one attempt of a row's history.
type Attempt = driver.Attempt

// History returns the recorded attempts of the row id, oldest first: its
// failed attempts and the one that finished it after a failure, the last
// driver.KeptAttempts of them (a row processed at its first attempt has
// none: its one attempt is the row itself).
func (o *Ops) History(ctx context.Context, id int64) ([]Attempt, error) {
	return driver.History(ctx, o.cfg.DB, id)
}
