package handlers

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event is one inbox row as handed to a handler. Handlers must not modify
// Payload, Key or Headers.
type Event struct {
	// ID is the row's primary key in the inbox table.
	ID int64
	// Source is where the event came from (the Kafka topic for ingested rows).
	Source string
	// EventID is the producer's id of the event, unique within Source (the
	// inbox deduplicates on Source and EventID together). Towards other
	// systems use IdempotencyKeyFor(ev), which is unique per inbox row.
	EventID string
	// EventType selects the handler.
	EventType string
	// Key is the Kafka message key, or nil.
	Key []byte
	// Payload is the message value, byte for byte.
	Payload []byte
	// Headers holds the message headers by name (the last value wins when a
	// name repeats). Ingest adds "inboxd-tombstone": "true" to the headers
	// of a Kafka tombstone (a message with a null value, stored with an empty
	// Payload), and to no other row.
	Headers map[string]string
	// Attempt is the number of this attempt, starting at 1.
	Attempt int
	// ReceivedAt is when the row was inserted.
	ReceivedAt time.Time
}

// Handler processes events outside any database transaction.
type Handler interface {
	// Handle processes ev. It returns nil when done, an error made with
	// Permanent when retrying cannot help, or any other error to retry.
	// ctx is cancelled when the worker loses the row's lease or shuts down.
	Handle(ctx context.Context, ev *Event) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, ev *Event) error

// Handle calls f(ctx, ev).
func (f HandlerFunc) Handle(ctx context.Context, ev *Event) error { return f(ctx, ev) }

// TxHandler processes events inside the transaction that marks the row
// processed, so its database writes take effect exactly when the row is
// processed.
type TxHandler interface {
	// HandleTx processes ev using tx. Returning an error rolls back
	// everything written through tx; the row is then retried or dead-lettered
	// as for Handler. HandleTx must not commit or roll back tx.
	HandleTx(ctx context.Context, tx pgx.Tx, ev *Event) error
}

// TxHandlerFunc adapts a function to TxHandler.
type TxHandlerFunc func(ctx context.Context, tx pgx.Tx, ev *Event) error

// HandleTx calls f(ctx, tx, ev).
func (f TxHandlerFunc) HandleTx(ctx context.Context, tx pgx.Tx, ev *Event) error {
	return f(ctx, tx, ev)
}
