package driver

// The statements of `inboxd outbox stats|dead|show|requeue|discard` on the
// outbox table (migrations/011_outbox.sql). The filtered ones share the
// inbox's filter (sql/failed_filter.sql) on the outbox's columns.

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// outboxColumns are the outbox's columns for sql/failed_filter.sql: the
// destination, and created_at (a dead row keeps no time of death).
var outboxColumns = filterColumns{Source: "destination", Time: "created_at"}

// The statuses `inboxd outbox requeue` and `discard` select rows by: dead
// rows, and pending ones for `discard --pending`.
var outboxAdminStatuses = []string{OutboxDead, OutboxPending}

var (
	outboxRangeSQL        = renderOutboxAdminEach("outbox_admin_range.sql")
	outboxMatchSQL        = renderOutboxAdminEach("outbox_admin_match.sql")
	outboxDeadSQL         = renderOutboxAdmin("outbox_admin_dead.sql", OutboxDead)
	outboxRequeueSQL      = renderOutboxAdmin("outbox_admin_requeue.sql", OutboxDead)
	outboxDiscardSQL      = renderOutboxAdminEach("outbox_admin_discard.sql")
	outboxRowsByIDSQL     = load("outbox_admin_rows_by_id.sql")
	outboxShowSQL         = load("outbox_admin_show.sql")
	outboxShowEventSQL    = load("outbox_admin_show_event.sql")
	outboxDestinationsSQL = load("outbox_admin_destinations.sql")
	outboxEstimateSQL     = load("outbox_admin_estimate.sql")
	outboxShardsSQL       = load("outbox_admin_shards.sql")
	outboxRelaysSQL       = load("outbox_admin_relays.sql")
)

// outboxAdminData is what the outbox's admin templates take: the filter's
// columns and the status of the rows selected.
type outboxAdminData struct {
	filterColumns
	Status string
}

// renderOutboxAdmin renders the outbox template sql/name for the rows of
// status st, with the filter on the outbox's columns and the CTE of the
// batch statements (sql/outbox_admin_batch.sql).
func renderOutboxAdmin(name, st string) string {
	return render(name, outboxAdminData{outboxColumns, st}, "failed_filter.sql", "outbox_admin_batch.sql")
}

// renderOutboxAdminEach is renderOutboxAdmin for each of
// outboxAdminStatuses, by status: the status is written into the
// statement, so that the planner reads its partial index.
func renderOutboxAdminEach(name string) map[string]string {
	m := make(map[string]string, len(outboxAdminStatuses))
	for _, st := range outboxAdminStatuses {
		m[st] = renderOutboxAdmin(name, st)
	}
	return m
}

// outboxAdminSQL is the statement of m for status st, or a panic for a
// status the admin statements do not select (a caller's bug).
func outboxAdminSQL(m map[string]string, st string) string {
	q, ok := m[st]
	if !ok {
		panic("driver: no outbox admin statement for status " + st)
	}
	return q
}

// OutboxDeadRow is one dead outbox row (or, for `discard --pending`, a
// pending one), without its payload and headers.
type OutboxDeadRow struct {
	ID          int64
	Destination string
	EventID     string
	EventType   string
	// Key is nil for a row without a key.
	Key      *string
	Attempts int
	// LastError is "" when the column is NULL.
	LastError string
	CreatedAt time.Time
}

// ListOutboxDead returns up to limit dead outbox rows that f matches (f.IDs
// and f.Status are not read), newest first (sql/outbox_admin_dead.sql).
func ListOutboxDead(ctx context.Context, db DB, f FailedFilter, limit int) ([]OutboxDeadRow, error) {
	args := f.args(0, math.MaxInt64)
	args["ids"] = nil
	args["limit"] = limit
	return queryAll(ctx, db, outboxDeadSQL, args, pgx.RowToStructByPos[OutboxDeadRow])
}

// OutboxRangeEnd returns the end of the next range of at most limit outbox
// rows of status st (OutboxDead, or OutboxPending) after the id after
// (only f.IDs when not nil); ok is false when none is left
// (sql/outbox_admin_range.sql). As for FailedRangeEnd, the other
// conditions of f do not count.
func OutboxRangeEnd(ctx context.Context, db DB, st string, f FailedFilter, after int64, limit int) (upto int64, ok bool, err error) {
	return queryRangeEnd(ctx, db, outboxAdminSQL(outboxRangeSQL, st), pgx.NamedArgs{"after": after, "ids": f.IDs, "limit": limit})
}

// MatchOutbox returns the outbox rows of status st (OutboxDead, or
// OutboxPending) f matches among the ids (after, upto], oldest id first,
// locking nothing (sql/outbox_admin_match.sql).
func MatchOutbox(ctx context.Context, db DB, st string, f FailedFilter, after, upto int64) ([]OutboxDeadRow, error) {
	return queryAll(ctx, db, outboxAdminSQL(outboxMatchSQL, st), f.args(after, upto), pgx.RowToStructByPos[OutboxDeadRow])
}

// RequeueOutboxDead hands the dead outbox rows f matches among the ids
// (after, upto] back to the relay (pending, attempts 0, due now, last_error
// kept), skipping the rows another statement holds, and returns their ids
// (sql/outbox_admin_requeue.sql).
func RequeueOutboxDead(ctx context.Context, db DB, f FailedFilter, after, upto int64) ([]int64, error) {
	return queryAll(ctx, db, outboxRequeueSQL, f.args(after, upto), pgx.RowTo[int64])
}

// DiscardOutbox deletes the outbox rows of status st (OutboxDead, or
// OutboxPending) f matches among the ids (after, upto], skipping the rows
// another statement holds, and returns their ids
// (sql/outbox_admin_discard.sql).
func DiscardOutbox(ctx context.Context, db DB, st string, f FailedFilter, after, upto int64) ([]int64, error) {
	return queryAll(ctx, db, outboxAdminSQL(outboxDiscardSQL, st), f.args(after, upto), pgx.RowTo[int64])
}

// OutboxRowState is what an outbox row is now, for explaining why a filter
// did not select it.
type OutboxRowState struct {
	ID          int64
	Status      string
	Destination string
	EventType   string
	CreatedAt   time.Time
	// LastError is "" when the column is NULL.
	LastError string
}

// OutboxRowStates returns the outbox rows with these ids; an id missing
// from the result has no row (sql/outbox_admin_rows_by_id.sql).
func OutboxRowStates(ctx context.Context, db DB, ids []int64) ([]OutboxRowState, error) {
	return queryAll(ctx, db, outboxRowsByIDSQL, pgx.NamedArgs{"ids": ids}, pgx.RowToStructByPos[OutboxRowState])
}

// ShowOutboxRow returns every column of the outbox row id in table order;
// ok is false when there is no such row (sql/outbox_admin_show.sql).
func ShowOutboxRow(ctx context.Context, db DB, id int64) (cols []Column, ok bool, err error) {
	return showByID(ctx, db, outboxShowSQL, id)
}

// ShowOutboxEvent returns every column of up to limit outbox rows with the
// event id eventID, oldest first (sql/outbox_admin_show_event.sql). It
// reads the whole table: no index holds event_id.
func ShowOutboxEvent(ctx context.Context, db DB, eventID string, limit int) ([][]Column, error) {
	rows, err := db.Query(ctx, outboxShowEventSQL, pgx.NamedArgs{"event_id": eventID, "limit": limit})
	if err != nil {
		return nil, err
	}
	return collectColumns(rows)
}

// OutboxDestination is one destination's backlog.
type OutboxDestination struct {
	Destination string
	Pending     int64
	// OldestPendingAge is the age by created_at of its oldest pending row;
	// 0 without pending rows.
	OldestPendingAge time.Duration
	Dead             int64
}

// OutboxShardHolder is a relay and the shards it holds a live lease on.
type OutboxShardHolder struct {
	// Owner is "" for the shards nobody holds.
	Owner  string
	Shards int
	// FirstExpiry and LastExpiry are the earliest and the latest end of
	// its leases (zero when Owner is "").
	FirstExpiry, LastExpiry time.Time
}

// OutboxRelay is one row of outbox_relays.
type OutboxRelay struct {
	Relay  string
	SeenAt time.Time
	// Alive says it was seen within the minute.
	Alive bool
}

// OutboxReport is what `inboxd outbox stats` reports. Published rows are
// never counted: PublishedEstimate is the planner's.
type OutboxReport struct {
	// Destinations are those with pending or dead rows, by name.
	Destinations []OutboxDestination
	// TableRowsEstimate is pg_class.reltuples of the outbox: negative when
	// the table was never vacuumed or analyzed.
	TableRowsEstimate float64
	Shards            []OutboxShardHolder
	Relays            []OutboxRelay
}

// ReadOutboxReport reads the outbox's figures through the partial indexes on
// pending and dead rows, and the shards and relays tables
// (sql/outbox_admin_destinations.sql, outbox_admin_estimate.sql,
// outbox_admin_shards.sql, outbox_admin_relays.sql): never a row of the
// published ones.
func ReadOutboxReport(ctx context.Context, db DB) (OutboxReport, error) {
	var s OutboxReport
	rows, err := db.Query(ctx, outboxDestinationsSQL)
	if err != nil {
		return s, err
	}
	s.Destinations, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxDestination, error) {
		var d OutboxDestination
		var age *float64
		err := r.Scan(&d.Destination, &d.Pending, &age, &d.Dead)
		if age != nil {
			d.OldestPendingAge = time.Duration(*age * float64(time.Second))
		}
		return d, err
	})
	if err != nil {
		return s, err
	}
	var est *float64
	if err := db.QueryRow(ctx, outboxEstimateSQL).Scan(&est); err != nil {
		return s, err
	}
	s.TableRowsEstimate = -1
	if est != nil {
		s.TableRowsEstimate = *est
	}
	rows, err = db.Query(ctx, outboxShardsSQL)
	if err != nil {
		return s, err
	}
	s.Shards, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxShardHolder, error) {
		var h OutboxShardHolder
		var owner *string
		var first, last *time.Time
		err := r.Scan(&owner, &h.Shards, &first, &last)
		if owner != nil && first != nil && last != nil {
			h.Owner, h.FirstExpiry, h.LastExpiry = *owner, *first, *last
		}
		return h, err
	})
	if err != nil {
		return s, err
	}
	rows, err = db.Query(ctx, outboxRelaysSQL)
	if err != nil {
		return s, err
	}
	s.Relays, err = pgx.CollectRows(rows, pgx.RowToStructByPos[OutboxRelay])
	return s, err
}
