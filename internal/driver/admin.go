package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/driver/status"
)

// The statements of the CLI's commands on dead and rejected rows (inboxd
// dead, requeue, discard, show). The filtered ones are text/templates that
// share the filter (sql/failed_filter.sql) and, for the two requeues, the
// SET that hands a row back to the workers (sql/requeue_set.sql).
var (
	failedListSQL      = load("failed_list.sql")
	failedRangeSQL     = load("failed_range.sql")
	failedMatchSQL     = renderAdmin("failed_match.sql")
	requeueSQL         = renderAdmin("requeue.sql")
	discardSQL         = renderAdmin("discard.sql")
	requeueRejectedSQL = renderAdmin("requeue_rejected.sql")
	rowsByIDSQL        = load("rows_by_id.sql")
	rejectedRowSQL     = load("rejected_row.sql")
	eventOwnerSQL      = load("event_owner.sql")
	showSQL            = load("show.sql")
)

// filterColumns names the columns sql/failed_filter.sql filters on, so that
// the one filter serves the inbox and the outbox.
type filterColumns struct {
	// Source is the column FailedFilter.Source matches.
	Source string
	// Time is the column FailedFilter.Since and Until bound.
	Time string
	// Key, when not "", is the column FailedFilter.Key matches.
	Key string
	// NoRange leaves out the range of ids (after, upto]: see
	// sql/failed_filter.sql.
	NoRange bool
	// ErrorIndex matches FailedFilter.Error (not "") in the form the error
	// text's index serves (sql/failed_filter.sql).
	ErrorIndex bool
}

// inboxColumns are the inbox's: a dead or rejected row's time is when it
// failed (updated_at).
var inboxColumns = filterColumns{Source: "source", Time: "updated_at", Key: "key"}

// renderAdmin renders the CLI's template sql/name with the templates it
// may call.
func renderAdmin(name string) string {
	return render(name, inboxColumns, "failed_filter.sql", "requeue_set.sql")
}

// FailedRow is one dead or rejected row, without its payload.
type FailedRow struct {
	ID        int64
	Status    status.Status
	Source    string
	EventID   string
	EventType string
	Attempts  int
	UpdatedAt time.Time
	// LastError is "" when the column is NULL.
	LastError string
}

// ListFailed returns up to limit rows of st (dead or rejected), newest
// first, of eventType ("" = any) (sql/failed_list.sql).
func ListFailed(ctx context.Context, db DB, st status.Status, eventType string, limit int) ([]FailedRow, error) {
	rows, err := db.Query(ctx, failedListSQL, string(st), eventType, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[FailedRow])
}

// FailedFilter selects dead or rejected rows for requeue and discard
// (sql/failed_filter.sql), of the inbox or of the outbox; its conditions
// combine with AND.
type FailedFilter struct {
	// Status is status.Dead or status.Rejected (the outbox's statements
	// read dead rows only, and ignore it).
	Status status.Status
	// IDs, when not nil, are the only rows that count.
	IDs []int64
	// EventType and Source, when not "", must match; Source is the inbox's
	// source, the outbox's destination.
	EventType string
	Source    string
	// Since and Until, when not nil, bound the row's time: [Since, Until).
	// The inbox's is updated_at (when the row failed), the outbox's
	// created_at (it keeps no time of death).
	Since *time.Time
	Until *time.Time
	// Error, when not "", must be part of last_error, in any case.
	Error string
	// Key, when not nil, must be the row's key (the inbox's statements
	// only).
	Key []byte
}

// args are the filter's named arguments for the range of ids (after, upto].
func (f FailedFilter) args(after, upto int64) pgx.NamedArgs {
	return pgx.NamedArgs{
		"status":     string(f.Status),
		"ids":        f.IDs, // nil: any
		"event_type": f.EventType,
		"source":     f.Source,
		"since":      f.Since,
		"until":      f.Until,
		"error":      f.Error,
		"key":        f.Key, // nil: any
		"after":      after,
		"upto":       upto,
	}
}

// FailedRangeEnd returns the end of the next range of at most limit rows of
// f.Status after the id after (only f.IDs when not nil): the id of the
// limit-th such row, or of the last one; ok is false when none is left
// (sql/failed_range.sql). The other conditions of f do not count, so that
// a range reads at most limit index entries however few rows match.
func FailedRangeEnd(ctx context.Context, db DB, f FailedFilter, after int64, limit int) (upto int64, ok bool, err error) {
	return queryRangeEnd(ctx, db, failedRangeSQL, pgx.NamedArgs{
		"status": string(f.Status), "after": after, "ids": f.IDs, "limit": limit,
	})
}

// queryRangeEnd runs a range statement (sql/failed_range.sql,
// outbox_admin_range.sql): the end of the next range, ok false when its
// NULL says none is left.
func queryRangeEnd(ctx context.Context, db DB, sql string, args pgx.NamedArgs) (upto int64, ok bool, err error) {
	var end *int64
	if err := db.QueryRow(ctx, sql, args).Scan(&end); err != nil || end == nil {
		return 0, false, err
	}
	return *end, true, nil
}

// queryAll runs sql with args and collects its rows with to; mode, when
// given, is how pgx runs it (pgx.QueryExecModeExec: planned for its values
// every time).
func queryAll[T any](ctx context.Context, db DB, sql string, args pgx.NamedArgs, to pgx.RowToFunc[T], mode ...pgx.QueryExecMode) ([]T, error) {
	opts := []any{args}
	for _, m := range mode {
		opts = append(opts, m)
	}
	rows, err := db.Query(ctx, sql, opts...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, to)
}

// MatchFailed returns the rows f matches among the ids (after, upto],
// oldest id first, locking nothing (sql/failed_match.sql).
func MatchFailed(ctx context.Context, db DB, f FailedFilter, after, upto int64) ([]FailedRow, error) {
	return queryAll(ctx, db, failedMatchSQL, f.args(after, upto), pgx.RowToStructByPos[FailedRow])
}

// RequeueDead returns the dead rows f matches among the ids (after, upto]
// to received as fresh, skipping the rows another statement holds, and
// returns their ids (sql/requeue.sql). f.Status is not read: only dead
// rows are requeued so.
func RequeueDead(ctx context.Context, db DB, f FailedFilter, after, upto int64) ([]int64, error) {
	return queryAll(ctx, db, requeueSQL, f.args(after, upto), pgx.RowTo[int64])
}

// DeletedRow is an inbox row deleted by hand (DiscardFailed): what
// unparking the rows behind it (UnparkDeleted) needs.
type DeletedRow struct {
	// ID is the deleted row's id: its successor is the next one after it.
	ID int64
	// Source and Key are the deleted row's ordering key; a nil Key has none.
	Source string
	Key    []byte
	// EventType is the deleted row's type (see sql/unpark_deleted.sql).
	EventType string
}

// DiscardFailed deletes the rows f matches among the ids (after, upto],
// skipping the rows another statement holds, and returns them
// (sql/discard.sql). Run it in the transaction that unparks the rows
// behind the deleted dead ones.
func DiscardFailed(ctx context.Context, db DB, f FailedFilter, after, upto int64) ([]DeletedRow, error) {
	return queryAll(ctx, db, discardSQL, f.args(after, upto), pgx.RowToStructByPos[DeletedRow])
}

// RowState is what a row is now, for explaining why a filter did not
// select it.
type RowState struct {
	ID        int64
	Status    status.Status
	Source    string
	EventType string
	UpdatedAt time.Time
}

// RowStates returns the rows with these ids; an id missing from the result
// has no row (sql/rows_by_id.sql).
func RowStates(ctx context.Context, db DB, ids []int64) ([]RowState, error) {
	return queryAll(ctx, db, rowsByIDSQL, pgx.NamedArgs{"ids": ids}, pgx.RowToStructByPos[RowState])
}

// RejectedRow is a rejected row as ingest stored it: what its message
// carried and where it came from.
type RejectedRow struct {
	Source  string
	EventID string
	Key     []byte
	Payload []byte
	// Headers is the headers column's JSON text.
	Headers string
	// Topic, Partition and Offset are the Kafka position; nil for a row
	// that did not come from Kafka.
	Topic     *string
	Partition *int32
	Offset    *int64
	// LastError is "" when the column is NULL.
	LastError string
}

// ReadRejected returns the rejected row id; ok is false when there is no
// such row or it is no longer rejected (sql/rejected_row.sql).
func ReadRejected(ctx context.Context, db DB, id int64) (r RejectedRow, ok bool, err error) {
	err = db.QueryRow(ctx, rejectedRowSQL, pgx.NamedArgs{"id": id}).Scan(&r.Source, &r.EventID, &r.Key, &r.Payload,
		&r.Headers, &r.Topic, &r.Partition, &r.Offset, &r.LastError)
	if errors.Is(err, pgx.ErrNoRows) {
		return RejectedRow{}, false, nil
	}
	if err != nil {
		return RejectedRow{}, false, err
	}
	return r, true, nil
}

// EventOwner returns the id and status of the row that holds (source,
// eventID); ok is false when none does (sql/event_owner.sql).
func EventOwner(ctx context.Context, db DB, source, eventID string) (id int64, st status.Status, ok bool, err error) {
	err = db.QueryRow(ctx, eventOwnerSQL, pgx.NamedArgs{"source": source, "event_id": eventID}).Scan(&id, &st)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, err
	}
	return id, st, true, nil
}

// ErrEventTaken is the error RequeueRejected wraps when another row holds
// the (source, event id) the rejected row was to take: the event arrived
// again meanwhile.
var ErrEventTaken = errors.New("the event id is taken by another row")

// RequeueRejected gives the rejected row id the event id and type its
// message maps to now and hands it to the workers; ok is false when the row
// is no longer rejected (sql/requeue_rejected.sql). When another row holds
// (source, eventID) the error wraps ErrEventTaken; a data error stays one
// for Classify.
func RequeueRejected(ctx context.Context, db DB, id int64, eventID, eventType string) (ok bool, err error) {
	tag, err := db.Exec(ctx, requeueRejectedSQL, pgx.NamedArgs{"id": id, "event_id": eventID, "event_type": eventType})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
		return false, fmt.Errorf("%w: %w", ErrEventTaken, err)
	}
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// Column is one column of a row as ShowRow reads it: its name and its value
// as pgx decodes it (bytea as []byte, jsonb as map[string]any, timestamptz
// as time.Time, NULL as nil).
type Column struct {
	Name  string
	Value any
}

// ShowRow returns every column of the row id in table order, whatever the
// schema version adds; ok is false when there is no such row
// (sql/show.sql).
func ShowRow(ctx context.Context, db DB, id int64) (cols []Column, ok bool, err error) {
	return showByID(ctx, db, showSQL, id)
}

// showByID runs a statement that reads every column of the row id
// (sql/show.sql, outbox_admin_show.sql); ok is false when there is none.
func showByID(ctx context.Context, db DB, sql string, id int64) (cols []Column, ok bool, err error) {
	rows, err := db.Query(ctx, sql, pgx.NamedArgs{"id": id})
	if err != nil {
		return nil, false, err
	}
	all, err := collectColumns(rows)
	if err != nil || len(all) == 0 {
		return nil, false, err
	}
	return all[0], true, nil
}

// collectColumns reads every row of rows as its columns, in the result's
// order, and closes rows.
func collectColumns(rows pgx.Rows) ([][]Column, error) {
	defer rows.Close()
	var out [][]Column
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return nil, err
		}
		fields := rows.FieldDescriptions()
		cols := make([]Column, len(fields))
		for i, fd := range fields {
			cols[i] = Column{Name: fd.Name, Value: values[i]}
		}
		out = append(out, cols)
	}
	rows.Close()
	return out, rows.Err()
}
