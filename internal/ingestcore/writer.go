package ingestcore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/handoff"
)

// InboxWriter persists batches of rows. WriteBatch writes all rows or none
// (one transaction), skips rows whose (source, event_id) is already present,
// and returns how many rows it actually inserted.
type InboxWriter interface {
	WriteBatch(ctx context.Context, rows []Row) (inserted int, err error)
}

// PGWriter is the InboxWriter on PostgreSQL: one multi-row INSERT per batch
// (driver.InsertBatch), handing rows off to the local workers when
// handOff is set.
type PGWriter struct {
	Pool    *pgxpool.Pool
	HandOff handoff.HandOff // nil: none
}

// WriterOn is the writer of a source storing its rows through pool and
// handing them off to h (nil: none).
func WriterOn(pool *pgxpool.Pool, h handoff.HandOff) (InboxWriter, error) {
	if pool == nil {
		return nil, errors.New("ingest: nil database pool")
	}
	return PGWriter{Pool: pool, HandOff: h}, nil
}

// DBPool is the pool w writes through: a source that needs statements of
// its own (the webhook source's replay window) runs them there.
func (w PGWriter) DBPool() *pgxpool.Pool { return w.Pool }

// WriteBatch implements InboxWriter.
func (w PGWriter) WriteBatch(ctx context.Context, rows []Row) (int, error) {
	nr := newRows(rows)
	if w.HandOff == nil {
		n, _, err := driver.InsertBatch(ctx, w.Pool, nr, nil)
		return n, err
	}
	res := w.HandOff.Reserve(nr)
	n, got, err := driver.InsertBatch(ctx, w.Pool, nr, res)
	if err != nil {
		w.HandOff.Cancel(res)
		return 0, err
	}
	w.HandOff.Deliver(ctx, res, nr, got)
	return n, nil
}

// newRows is rows as the driver writes them.
func newRows(rows []Row) []driver.NewRow {
	out := make([]driver.NewRow, len(rows))
	for i, r := range rows {
		out[i] = driver.NewRow{
			Source:    r.Source,
			EventID:   r.EventID,
			EventType: r.EventType,
			Key:       r.Key,
			Payload:   r.Payload,
			Headers:   r.Headers,
			Status:    status.Status(r.Status),
			LastError: r.LastError,
			Kafka:     r.Kafka,
			Partition: r.Partition,
			Offset:    r.Offset,
		}
	}
	return out
}

// PlaceholderFor is the row stored instead of one the database refused: its
// position as event id, status rejected, and the database's message (never
// the row's content) in last_error. It keeps what the message carried (key,
// payload and headers, where the event id and type came from) so that it
// can be requeued once the cause is fixed.
func PlaceholderFor(r Row, pgErr *pgconn.PgError) Row {
	return Row{
		Source:    r.Source,
		EventID:   r.RejectedID(),
		Key:       r.Key,
		Payload:   r.Payload,
		Headers:   r.Headers,
		Status:    StatusRejected,
		LastError: fmt.Sprintf("database refused the row: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code),
		Reason:    RejectRefused,
		Kafka:     r.Kafka,
		Partition: r.Partition,
		Offset:    r.Offset,
		RejectID:  r.RejectID,
	}
}
