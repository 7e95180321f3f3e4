package driver

// The statements of the operator console (internal/console): its pages
// read the inbox through indexes only, never counting the table.

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailedBatch is how many dead or rejected rows requeue and discard (the
// CLI's and the console's) take at a time: each batch is a range of ids
// (see sql/failed_range.sql) changed by a short statement (or transaction)
// of its own, so that no statement grows with the backlog (a million rows
// in one UPDATE outlasted INBOXD_STATEMENT_TIMEOUT and requeued nothing),
// and what a run did stays done when it stops: running it again picks up
// what is left. A batch must fit well within the smallest
// INBOXD_STATEMENT_TIMEOUT (1 s) on a busy server: 5,000 dead rows locked
// and requeued took 50 to 320 ms on the loaded 2-core test machine, 1,000
// take a fifth of that.
const FailedBatch = 1000

var (
	consoleFailedPageSQL  = render("console_failed_page.sql", inboxColumns, "failed_filter.sql")
	consoleThroughputSQL  = load("console_throughput.sql")
	consoleEventSearchSQL = load("console_event_search.sql")
	consoleKeyHeldSQL     = load("console_key_held.sql")
	consoleBlockedSQL     = load("console_blocked.sql")
	consoleFailingSQL     = load("console_failing_heads.sql")
)

// FailedPage returns up to limit rows f matches (f.Status dead or
// rejected) with ids below before (0: from the newest), newest first
// (sql/console_failed_page.sql): the console's keyset paging, whose next
// page starts below the last id returned.
func FailedPage(ctx context.Context, db DB, f FailedFilter, before int64, limit int) ([]FailedRow, error) {
	upto := int64(math.MaxInt64)
	if before > 0 {
		upto = before - 1
	}
	args := f.args(0, upto)
	args["limit"] = limit
	rows, err := queryAll(ctx, db, consoleFailedPageSQL, args, pgx.RowToStructByPos[FailedRow])
	if err != nil {
		return nil, fmt.Errorf("list %s rows: %w", f.Status, err)
	}
	return rows, nil
}

// MinuteCounts are the rows processed and the rows that died in one
// minute.
type MinuteCounts struct {
	// Minute is the minute's start.
	Minute          time.Time
	Processed, Dead int64
}

// Throughput returns the rows processed and died per minute over the last
// hour, oldest first; minutes without either are absent
// (sql/console_throughput.sql).
func Throughput(ctx context.Context, db DB) ([]MinuteCounts, error) {
	rows, err := db.Query(ctx, consoleThroughputSQL)
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MinuteCounts, error) {
		var m MinuteCounts
		var epoch int64
		err := r.Scan(&epoch, &m.Processed, &m.Dead)
		m.Minute = time.Unix(epoch, 0).UTC()
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	return out, nil
}

// FindEvent returns the rows of every source that hold eventID, at most
// 100 (sql/console_event_search.sql: a loose index scan over the sources,
// never a sequential scan).
func FindEvent(ctx context.Context, db DB, eventID string) ([]FailedRow, error) {
	rows, err := queryAll(ctx, db, consoleEventSearchSQL, pgx.NamedArgs{"event_id": eventID}, pgx.RowToStructByPos[FailedRow])
	if err != nil {
		return nil, fmt.Errorf("find event: %w", err)
	}
	return rows, nil
}

// KeyHeld returns up to limit live rows of the ordering key of the row id
// that come after it, oldest first: on an ordered route, the rows a dead
// row holds back (sql/console_key_held.sql). A row without a key holds
// none.
func KeyHeld(ctx context.Context, db DB, id int64, limit int) ([]FailedRow, error) {
	rows, err := queryAll(ctx, db, consoleKeyHeldSQL, pgx.NamedArgs{"id": id, "limit": limit}, pgx.RowToStructByPos[FailedRow])
	if err != nil {
		return nil, fmt.Errorf("rows behind row %d: %w", id, err)
	}
	return rows, nil
}

// BlockedKey is a key of an ordered route held back by its dead head
// row, and the live rows of its key waiting behind it.
type BlockedKey struct {
	ID        int64
	Source    string
	EventID   string
	EventType string
	// Key is the key's bytes as escaped text.
	Key       string
	UpdatedAt time.Time
	// Held counts the live rows behind it, up to 1,000.
	Held int64
}

// BlockedKeyList returns up to limit keys held back by a dead row of one
// of blockingTypes (the routes with on_dead: block), one per (source,
// key) with its head (the key's oldest dead row) below before (0: from
// the newest), newest head first, each with the rows behind it
// (sql/console_blocked.sql): as many keys in all as BlockedKeys counts.
func BlockedKeyList(ctx context.Context, db DB, blockingTypes []string, before int64, limit int) ([]BlockedKey, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	rows, err := queryAll(ctx, db, consoleBlockedSQL, pgx.NamedArgs{"before": before, "limit": limit,
		"blocking_types": append([]string{}, blockingTypes...)}, pgx.RowToStructByPos[BlockedKey])
	if err != nil {
		return nil, fmt.Errorf("blocked keys: %w", err)
	}
	return rows, nil
}

// FailingHead is a key of an ordered route held back by a received row
// that has failed and waits for its next attempt: the key's oldest live
// row, with rows of its key behind it.
type FailingHead struct {
	ID        int64
	Source    string
	EventID   string
	EventType string
	// Key is the key's bytes as escaped text.
	Key       string
	Attempts  int32
	LastError string
	// NextAttempt is when the head is tried again.
	NextAttempt time.Time
	// Held counts the live rows behind it, up to 1,000.
	Held int64
}

// FailingHeads returns up to limit keys of orderedTypes held back by a
// failing head, soonest next attempt first (sql/console_failing_heads.sql).
func FailingHeads(ctx context.Context, db DB, orderedTypes []string, limit int) ([]FailingHead, error) {
	rows, err := queryAll(ctx, db, consoleFailingSQL, pgx.NamedArgs{"limit": limit,
		"ordered_types": append([]string{}, orderedTypes...)}, pgx.RowToStructByPos[FailingHead])
	if err != nil {
		return nil, fmt.Errorf("failing heads: %w", err)
	}
	return rows, nil
}
