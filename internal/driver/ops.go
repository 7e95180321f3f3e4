package driver

// The statements of the operator's actions and lists (internal/ops) that
// the CLI and the console share: actions on live rows (cancel, retry now,
// discard of a received row), the lists of every status, and the audit
// trail. The actions on dead and rejected rows are admin.go's.

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/driver/status"
)

// LiveAction is an action on live rows: what sql/ops_eligible.sql lets it
// change.
type LiveAction string

// The live actions.
const (
	// LiveCancel moves received or processing rows to dead.
	LiveCancel LiveAction = "cancel"
	// LiveRetryNow makes received rows in backoff due now.
	LiveRetryNow LiveAction = "retry_now"
	// LiveDiscard deletes received rows.
	LiveDiscard LiveAction = "discard"
)

// liveColumns is the data of the live statements' templates.
type liveColumns struct {
	filterColumns
	// Status is the status read ('received' or 'processing'), Action the
	// action (sql/ops_eligible.sql), OrderAt the first column of the
	// status's partial index.
	Status, Action, OrderAt string
}

// orderAt is the first column of the partial index of each live status.
var orderAt = map[status.Status]string{status.Received: "available_at", status.Processing: "lease_expires_at"}

// liveColumnsOf are the inbox's columns for a live status: its time is
// when it was received.
func liveColumnsOf(st status.Status, a LiveAction) liveColumns {
	return liveColumns{filterColumns: filterColumns{Source: "source", Time: "received_at", Key: "key", NoRange: true},
		Status: string(st), Action: string(a), OrderAt: orderAt[st]}
}

// liveStatements holds a statement per live status and action.
type liveKey struct {
	st status.Status
	a  LiveAction
}

var (
	liveMatchSQL   = renderLiveMatches()
	cancelSQL      = renderCancels()
	retryNowSQL    = render("ops_retry_now.sql", liveColumnsOf(status.Received, LiveRetryNow), "failed_filter.sql", "ops_eligible.sql", "ops_batch.sql")
	discardLiveSQL = render("ops_discard_live.sql", liveColumnsOf(status.Received, LiveDiscard), "failed_filter.sql", "ops_eligible.sql", "ops_batch.sql")
	auditInsertSQL = load("ops_audit_insert.sql")
	auditListSQL   = load("ops_audit_list.sql")
)

// renderLiveMatches renders the dry runs' statement of each live status
// and action.
func renderLiveMatches() map[liveKey]string {
	out := map[liveKey]string{}
	for _, st := range []status.Status{status.Received, status.Processing} {
		for _, a := range []LiveAction{LiveCancel, LiveRetryNow, LiveDiscard} {
			out[liveKey{st, a}] = render("ops_live_match.sql", liveColumnsOf(st, a), "failed_filter.sql", "ops_eligible.sql", "ops_batch.sql")
		}
	}
	return out
}

// renderCancels renders the cancel statement of each live status.
func renderCancels() map[status.Status]string {
	out := map[status.Status]string{}
	for _, st := range []status.Status{status.Received, status.Processing} {
		out[st] = render("ops_cancel.sql", liveColumnsOf(st, LiveCancel), "failed_filter.sql", "ops_eligible.sql", "ops_batch.sql")
	}
	return out
}

// LiveStatuses are the statuses an action of a reads: cancel, received
// and processing rows; retry now and discard, received rows.
func LiveStatuses(a LiveAction) []status.Status {
	if a == LiveCancel {
		return []status.Status{status.Received, status.Processing}
	}
	return []status.Status{status.Received}
}

// liveArgs are f's arguments over the whole id range, with a batch limit.
func (f FailedFilter) liveArgs(limit int) pgx.NamedArgs {
	args := f.args(0, math.MaxInt64)
	args["limit"] = limit
	return args
}

// LiveRow is a live row a dry run lists, with its place in the order of
// its status's index (the keyset of the next batch).
type LiveRow struct {
	FailedRow
	// OrderAt is the row's available_at (received) or lease_expires_at
	// (processing).
	OrderAt time.Time
}

// MatchLive returns up to limit rows of st that the action a on f would
// change, after the keyset (afterAt, afterID) in the order of st's index
// (sql/ops_live_match.sql).
func MatchLive(ctx context.Context, db DB, a LiveAction, st status.Status, f FailedFilter, afterAt time.Time, afterID int64, limit int) ([]LiveRow, error) {
	sql, ok := liveMatchSQL[liveKey{st, a}]
	if !ok {
		return nil, fmt.Errorf("%s reads no %s rows", a, st)
	}
	args := f.liveArgs(limit)
	args["after_at"], args["after_id"] = afterAt, afterID
	return queryAll(ctx, db, sql, args, func(r pgx.CollectableRow) (LiveRow, error) {
		var l LiveRow
		err := r.Scan(&l.ID, &l.Status, &l.Source, &l.EventID, &l.EventType, &l.Attempts, &l.UpdatedAt, &l.LastError, &l.OrderAt)
		return l, err
	})
}

// CancelLive moves up to limit rows of st (received or processing) that f
// selects to dead with reason as their last_error, and returns their ids
// (sql/ops_cancel.sql). Repeat it until it returns none.
func CancelLive(ctx context.Context, db DB, st status.Status, f FailedFilter, reason string, limit int) ([]int64, error) {
	sql, ok := cancelSQL[st]
	if !ok {
		return nil, fmt.Errorf("cancel reads no %s rows", st)
	}
	args := f.liveArgs(limit)
	args["reason"] = reason
	return queryAll(ctx, db, sql, args, pgx.RowTo[int64])
}

// RetryNow makes up to limit received rows in backoff that f selects due
// now and returns their ids (sql/ops_retry_now.sql). Repeat it until it
// returns none.
func RetryNow(ctx context.Context, db DB, f FailedFilter, limit int) ([]int64, error) {
	return queryAll(ctx, db, retryNowSQL, f.liveArgs(limit), pgx.RowTo[int64])
}

// DiscardLive deletes up to limit received rows that f selects and
// returns them (sql/ops_discard_live.sql): run it in the transaction that
// unparks the rows behind them (UnparkDeleted). Repeat it until it returns
// none.
func DiscardLive(ctx context.Context, db DB, f FailedFilter, limit int) ([]DeletedRow, error) {
	return queryAll(ctx, db, discardLiveSQL, f.liveArgs(limit), pgx.RowToStructByPos[DeletedRow])
}

// AuditEntry is one entry of the operators' audit trail (migration 016).
type AuditEntry struct {
	ID int64
	At time.Time
	// Operator is who acted, Origin from where ("cli user@host",
	// "console 192.0.2.1").
	Operator, Origin string
	// Action is what: requeue, discard, cancel, retry_now, pause, resume,
	// sign_in, sign_out.
	Action string
	DryRun bool
	// Filter is the rows' filter as JSON text ("{}": none).
	Filter string
	// RowIDs are the first rows changed (or matched by a dry run).
	RowIDs []int64
	// RowCount is how many rows it changed (or a dry run matched).
	RowCount int64
	// Detail is the action's own text: a reason, a route.
	Detail string
	// Error is how it failed; "" when it succeeded.
	Error string
}

// InsertAudit appends e (its ID and At are ignored) to the audit trail and
// returns its id and time (sql/ops_audit_insert.sql).
func InsertAudit(ctx context.Context, db DB, e AuditEntry) (int64, time.Time, error) {
	var errText *string
	if e.Error != "" {
		errText = &e.Error
	}
	filter := e.Filter
	if filter == "" {
		filter = "{}"
	}
	var id int64
	var at time.Time
	err := db.QueryRow(ctx, auditInsertSQL, pgx.NamedArgs{
		"operator": e.Operator, "origin": e.Origin, "action": e.Action, "dry_run": e.DryRun, "filter": filter,
		"row_ids": e.RowIDs, "row_count": e.RowCount, "detail": e.Detail, "error": errText,
	}).Scan(&id, &at)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("write the audit trail: %w", err)
	}
	return id, at, nil
}

// AuditQuery selects a page of the audit trail.
type AuditQuery struct {
	// Before is the keyset: entries with ids below it (0: from the newest).
	Before int64
	// Operator and Action, when not "", must match.
	Operator, Action string
	// Since, when not nil, bounds the entries' time.
	Since *time.Time
	Limit int
}

// ListAudit returns a page of the audit trail, newest first
// (sql/ops_audit_list.sql).
func ListAudit(ctx context.Context, db DB, q AuditQuery) ([]AuditEntry, error) {
	before := q.Before
	if before <= 0 {
		before = math.MaxInt64
	}
	out, err := queryAll(ctx, db, auditListSQL, pgx.NamedArgs{"before": before, "operator": q.Operator, "action": q.Action,
		"since": q.Since, "limit": q.Limit}, pgx.RowToStructByPos[AuditEntry])
	if err != nil {
		return nil, fmt.Errorf("list the audit trail: %w", err)
	}
	return out, nil
}

// ListView is one of the lists of rows an operator reads (sql/ops_list.sql).
type ListView string

// The views.
const (
	// ViewRetrying lists received rows with attempts used, waiting for
	// their next attempt, soonest first.
	ViewRetrying ListView = "retrying"
	// ViewWaiting lists received rows not yet attempted (due, or due later)
	// and parked rows (waiting behind their key), oldest first.
	ViewWaiting ListView = "waiting"
	// ViewProcessing lists processing rows and rows reserved at ingest
	// (their handler runs), by lease expiry.
	ViewProcessing ListView = "processing"
	// ViewProcessed lists processed rows, most recent first.
	ViewProcessed ListView = "processed"
	// ViewDead and ViewRejected list dead and rejected rows, newest id first.
	ViewDead     ListView = "dead"
	ViewRejected ListView = "rejected"
)

// Views are every view, in the order an operator reads them.
var Views = []ListView{ViewRetrying, ViewWaiting, ViewProcessing, ViewProcessed, ViewDead, ViewRejected}

// viewSQL is the data of sql/ops_list.sql for a view.
type viewSQL struct {
	filterColumns
	// Where is the view's own condition, OrderAt its keyset's time column
	// ("" for by id), Desc whether it reads backwards.
	Where, OrderAt string
	Desc           bool
	// ByKey reads the key's rows through inbox_key_hash_idx; Window the
	// view's first @window rows only (listVariant).
	ByKey, Window bool
}

// listColumns are the lists' filter columns, time being the column
// --since and --until bound.
func listColumns(time string) filterColumns {
	return filterColumns{Source: "source", Time: time, Key: "key", NoRange: true}
}

const parkedMark = "'9999-12-31 00:00:00+00'"

var views = map[ListView]viewSQL{
	ViewRetrying: {filterColumns: listColumns("received_at"),
		Where: "i.status = 'received' AND i.lease_token IS NULL AND i.attempts > 0 AND i.available_at <> " + parkedMark, OrderAt: "i.available_at"},
	ViewWaiting: {filterColumns: listColumns("received_at"),
		Where: "i.status = 'received' AND i.lease_token IS NULL AND (i.attempts = 0 OR i.available_at = " + parkedMark + ")", OrderAt: "i.available_at"},
	ViewProcessed: {filterColumns: listColumns("processed_at"), Where: "i.status = 'processed'", OrderAt: "i.processed_at", Desc: true},
	ViewDead:      {filterColumns: listColumns("updated_at"), Where: "i.status = 'dead' AND i.status IN ('dead', 'rejected')", Desc: true},
	ViewRejected:  {filterColumns: listColumns("updated_at"), Where: "i.status = 'rejected' AND i.status IN ('dead', 'rejected')", Desc: true},
}

// processingViews are the two halves of ViewProcessing: processing rows,
// and received rows reserved at ingest.
var processingViews = [2]viewSQL{
	{filterColumns: listColumns("received_at"), Where: "i.status = 'processing'", OrderAt: "i.lease_expires_at"},
	// A reservation's available_at is its lease's end (renewals move it to
	// now + the lease): those ending within the lease (@window_ms) are read,
	// not every received row.
	{filterColumns: listColumns("received_at"), Where: "i.status = 'received' AND i.lease_token IS NOT NULL" +
		" AND i.available_at > now() AND i.available_at <= now() + @window_ms::bigint * interval '1 millisecond'", OrderAt: "i.available_at"},
}

// DefaultReservationWindow is ListQuery.Lease when it is zero.
const DefaultReservationWindow = time.Minute

// listVariant is how a list statement reads its view's rows.
type listVariant struct {
	// byKey: through the key's index (keyViews only; its error search
	// is searchScan).
	byKey bool
	// search is how it matches an error text.
	search errorSearch
}

// errorSearch is how a list matches FailedFilter.Error.
type errorSearch int

const (
	// searchScan tests each row the view's index gives, in order (no
	// error text, or no index for it).
	searchScan errorSearch = iota
	// searchWindow tests the view's first ErrorSearchWindow rows only.
	searchWindow
	// searchIndex finds the text's rows through inbox_error_trgm_idx.
	searchIndex
)

// ErrorSearchWindow is how many rows of a view, in its order, a search by
// error text reads before it turns to the text's index: a text that many
// rows hold fills a page among the first ones, faster than the index finds
// them all; a text that few or none hold is the index's.
const ErrorSearchWindow = 1000

// keyViews are the views whose rows inbox_key_hash_idx holds (received,
// processing and dead rows with a key): their key filter reads it.
var keyViews = map[ListView]bool{ViewRetrying: true, ViewWaiting: true, ViewProcessing: true, ViewDead: true}

// variantOf is the data of sql/ops_list.sql for d read as v.
func variantOf(d viewSQL, v listVariant) viewSQL {
	d.ByKey = v.byKey
	d.Window = v.search == searchWindow
	d.ErrorIndex = v.search == searchIndex
	return d
}

// listVariants are the variants of a view's statement.
func listVariants(byKey bool) []listVariant {
	out := []listVariant{{search: searchScan}, {search: searchWindow}, {search: searchIndex}}
	if byKey {
		out = append(out, listVariant{byKey: true, search: searchScan})
	}
	return out
}

var (
	listSQL           = renderLists()
	listProcessingSQL = renderProcessingLists()
)

// renderLists renders the list statements of each view, per variant.
func renderLists() map[ListView]map[listVariant]string {
	out := map[ListView]map[listVariant]string{}
	for v, d := range views {
		out[v] = map[listVariant]string{}
		for _, lv := range listVariants(keyViews[v]) {
			out[v][lv] = render("ops_list.sql", variantOf(d, lv), "failed_filter.sql")
		}
	}
	return out
}

// renderProcessingLists renders the processing view's two statements,
// per variant.
func renderProcessingLists() (out [2]map[listVariant]string) {
	for i, d := range processingViews {
		out[i] = map[listVariant]string{}
		for _, lv := range listVariants(true) {
			out[i][lv] = render("ops_list.sql", variantOf(d, lv), "failed_filter.sql")
		}
	}
	return out
}

// ListedRow is a row of an operator's list, without its payload.
type ListedRow struct {
	ID        int64
	Status    status.Status
	Source    string
	EventID   string
	EventType string
	// Key is nil for a row without one.
	Key        []byte
	Attempts   int
	ReceivedAt time.Time
	UpdatedAt  time.Time
	// AvailableAt is the next attempt's earliest time (received rows);
	// ParkedAt's mark for a parked row.
	AvailableAt    time.Time
	LeaseExpiresAt *time.Time
	// Worker is the worker holding the row ("" when none).
	Worker      string
	ProcessedAt *time.Time
	LastError   string
	// HeadID and HeadStatus are, for a parked row, the row of its key it
	// waits behind (0 and "" when none is found: the sweeper unparks it).
	HeadID     int64
	HeadStatus status.Status
	// RoutePaused says the row's route is paused.
	RoutePaused bool
	// OrderAt is the row's place in its view's order (the keyset).
	OrderAt time.Time
}

// Parked says whether r waits behind an earlier row of its key.
func (r ListedRow) Parked() bool { return r.AvailableAt.Year() == 9999 }

// ListQuery selects one page of a view.
type ListQuery struct {
	View ListView
	// Filter narrows it (Status and IDs are not read).
	Filter FailedFilter
	// AfterAt and AfterID are the keyset: the last row of the previous page
	// (zero: from the start). Views by id read AfterID alone.
	AfterAt time.Time
	AfterID int64
	Limit   int
	// Lease is the workers' lease (INBOXD_LEASE): ViewProcessing reads the
	// reservations at ingest whose lease ends within it (zero:
	// DefaultReservationWindow).
	Lease time.Duration
	// window replaces ErrorSearchWindow (tests).
	window int
}

// args are the named arguments of q's statements.
func (q ListQuery) args() (pgx.NamedArgs, error) {
	args := q.Filter.args(0, math.MaxInt64)
	args["ids"], args["limit"] = []int64(nil), q.Limit
	if q.Lease <= 0 {
		q.Lease = DefaultReservationWindow
	}
	args["window_ms"] = q.Lease.Milliseconds()
	d, ok := views[q.View]
	switch {
	case q.View == ViewProcessing:
		d = processingViews[0]
	case !ok:
		return nil, fmt.Errorf("no list %q (lists: retrying, waiting, processing, processed, dead, rejected)", q.View)
	}
	args["after_at"], args["after_id"] = q.AfterAt, q.AfterID
	if d.OrderAt == "" {
		args["after_id"] = int64(math.MaxInt64)
		if q.AfterID > 0 {
			args["after_id"] = q.AfterID
		}
	} else if q.AfterAt.IsZero() && q.AfterID == 0 {
		args["after_at"], args["after_id"] = time.Time{}, int64(0)
		if d.Desc {
			args["after_at"], args["after_id"] = time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC), int64(math.MaxInt64)
		}
	}
	args["window"] = ErrorSearchWindow
	if q.window > 0 {
		args["window"] = q.window
	}
	return args, nil
}

// ListRows returns one page of q.View (sql/ops_list.sql).
func ListRows(ctx context.Context, db DB, q ListQuery) ([]ListedRow, error) {
	args, err := q.args()
	if err != nil {
		return nil, err
	}
	scan := func(r pgx.CollectableRow) (ListedRow, error) {
		var l ListedRow
		err := r.Scan(&l.ID, &l.Status, &l.Source, &l.EventID, &l.EventType, &l.Key, &l.Attempts, &l.ReceivedAt, &l.UpdatedAt,
			&l.AvailableAt, &l.LeaseExpiresAt, &l.Worker, &l.ProcessedAt, &l.LastError, &l.HeadID, &l.HeadStatus, &l.RoutePaused, &l.OrderAt)
		return l, err
	}
	page := func(search errorSearch) ([]ListedRow, error) {
		lv := listVariant{byKey: q.Filter.Key != nil && keyViews[q.View], search: search}
		// The text's index only serves a plan made for the text: a generic
		// plan (pgx prepares statements; PostgreSQL may plan them once for
		// any value after five runs) cannot weigh its trigrams.
		var mode []pgx.QueryExecMode
		if search == searchIndex {
			mode = append(mode, pgx.QueryExecModeExec)
		}
		if q.View != ViewProcessing {
			out, err := queryAll(ctx, db, listSQL[q.View][lv], args, scan, mode...)
			if err != nil {
				return nil, fmt.Errorf("list %s rows: %w", q.View, err)
			}
			return out, nil
		}
		// Processing rows and reservations, merged by lease expiry (a
		// reservation's available_at is its lease's end).
		var all []ListedRow
		for _, sqls := range listProcessingSQL {
			part, err := queryAll(ctx, db, sqls[lv], args, scan, mode...)
			if err != nil {
				return nil, fmt.Errorf("list processing rows: %w", err)
			}
			all = append(all, part...)
		}
		sortByOrder(all)
		if len(all) > q.Limit {
			all = all[:q.Limit]
		}
		return all, nil
	}
	if q.Filter.Error == "" || q.Filter.Key != nil && keyViews[q.View] {
		return page(searchScan) // a key's rows are few: each is tested
	}
	// An error text: the view's first rows, then (the page not full) the
	// text's index, or every row of the view without one.
	out, err := page(searchWindow)
	if err != nil || len(out) >= q.Limit {
		return out, err
	}
	ready, err := ErrorIndexReady(ctx, db)
	if err != nil {
		return nil, err
	}
	if ready {
		return page(searchIndex)
	}
	return page(searchScan)
}

var errorIndexSQL = load("error_index_ready.sql")

// ErrorIndexReady says whether the index of the search by error text
// (inbox_error_trgm_idx, migration 21: pg_trgm) is there and valid, on
// the inbox and on each of its partitions (sql/error_index_ready.sql).
func ErrorIndexReady(ctx context.Context, db DB) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, errorIndexSQL).Scan(&ok); err != nil {
		return false, fmt.Errorf("look for the error text's index: %w", err)
	}
	return ok, nil
}

// sortByOrder sorts rows by (OrderAt, ID).
func sortByOrder(rows []ListedRow) {
	slices.SortFunc(rows, func(a, b ListedRow) int {
		if c := a.OrderAt.Compare(b.OrderAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

var routeKnownSQL = load("ops_route_known.sql")

// RouteKnown says whether the database knows route: an operator's control
// of it, an outcome of its rows in the rollup, or a processing row of it
// (sql/ops_route_known.sql).
func RouteKnown(ctx context.Context, db DB, route string) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, routeKnownSQL, pgx.NamedArgs{"route": route}).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up route %q: %w", route, err)
	}
	return ok, nil
}
