package ingest

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed insert_batch.sql
var insertBatchSQL string

// inboxWriter persists batches of rows. WriteBatch writes all rows or none
// (one transaction), skips rows whose (source, event_id) is already present,
// and returns how many rows it actually inserted.
type inboxWriter interface {
	WriteBatch(ctx context.Context, rows []Row) (inserted int, err error)
}

// pgWriter is the inboxWriter on PostgreSQL: one multi-row INSERT per batch.
type pgWriter struct {
	pool *pgxpool.Pool
}

// WriteBatch implements inboxWriter.
func (w pgWriter) WriteBatch(ctx context.Context, rows []Row) (int, error) {
	n := len(rows)
	var (
		sources    = make([]string, n)
		eventIDs   = make([]string, n)
		eventTypes = make([]string, n)
		keys       = make([][]byte, n)
		payloads   = make([][]byte, n)
		headers    = make([]string, n)
		statuses   = make([]string, n)
		lastErrors = make([]string, n)
		partitions = make([]int32, n)
		offsets    = make([]int64, n)
	)
	for i, r := range rows {
		sources[i] = r.Source
		eventIDs[i] = r.EventID
		eventTypes[i] = r.EventType
		keys[i] = r.Key
		payloads[i] = r.Payload
		headers[i] = string(r.Headers)
		statuses[i] = r.Status
		lastErrors[i] = r.LastError
		partitions[i] = r.Partition
		offsets[i] = r.Offset
	}
	tag, err := w.pool.Exec(ctx, insertBatchSQL, sources, eventIDs, eventTypes, keys, payloads,
		headers, statuses, lastErrors, partitions, offsets)
	if err != nil {
		return 0, fmt.Errorf("insert batch of %d rows: %w", n, err)
	}
	return int(tag.RowsAffected()), nil
}

// refusedByDatabase reports whether err is the database refusing the data
// itself: a data exception (class 22: a value it cannot store, such as an
// untranslatable character on a non-UTF-8 database) or a program limit
// (class 54, such as an index row too large). Retrying the same rows cannot
// succeed. Everything else, integrity violations included (an identity
// clash, a constraint someone added, a missing table), says nothing bad
// about the message: the batch is retried and ingest pauses meanwhile.
func refusedByDatabase(err error) (*pgconn.PgError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return nil, false
	}
	switch pgErr.Code[:2] {
	case "22", "54":
		return pgErr, true
	}
	return nil, false
}

// placeholderFor is the row stored instead of one the database refused: its
// position as event id, status rejected, and the database's message (never
// the row's content) in last_error. It keeps what the message carried (key,
// payload and headers, where the event id and type came from) so that it
// can be requeued once the cause is fixed.
func placeholderFor(r Row, pgErr *pgconn.PgError) Row {
	return Row{
		Source:    r.Source,
		EventID:   PositionID(r.Source, int(r.Partition), r.Offset),
		Key:       r.Key,
		Payload:   r.Payload,
		Headers:   r.Headers,
		Status:    StatusRejected,
		LastError: fmt.Sprintf("database refused the row: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code),
		Reason:    RejectRefused,
		Partition: r.Partition,
		Offset:    r.Offset,
	}
}
