package handlers

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// BatchHandler processes a route's events many at a time, outside any
// database transaction (at-least-once, as Handler: each event carries its
// idempotency key, IdempotencyKeyFor).
type BatchHandler interface {
	// HandleBatch processes evs, at most the route's Batch.MaxRows of them,
	// in the order they were claimed. It returns nil when every event is
	// done; RowErrors to give rows outcomes of their own (nil: processed,
	// Permanent: dead at once, RetryAfter or any other error: retried with
	// its own backoff); and any other error when the whole batch failed:
	// every event of it is retried (a Permanent error for the whole batch
	// is retried too, as no row is to blame, unless the batch holds one
	// event). ctx is cancelled when the worker shuts down, the route's
	// timeout ends, or every row's lease is lost.
	HandleBatch(ctx context.Context, evs []*Event) error
}

// BatchHandlerFunc adapts a function to BatchHandler.
type BatchHandlerFunc func(ctx context.Context, evs []*Event) error

// HandleBatch calls f(ctx, evs).
func (f BatchHandlerFunc) HandleBatch(ctx context.Context, evs []*Event) error { return f(ctx, evs) }

// TxBatchHandler processes a route's events many at a time inside one
// transaction, the one that writes every row's outcome: the handler's
// writes, the rows' moves to processed (or back to received, or dead) and
// the messages it writes with inboxd.Emit commit together, or not at all.
type TxBatchHandler interface {
	// HandleBatchTx processes evs using tx; it returns as
	// BatchHandler.HandleBatch does. With RowErrors, the writes in tx commit
	// with every row's outcome: the handler must not have written anything
	// for the rows it fails (a savepoint per row does it, when a row's
	// writes may fail half-way). Any other error rolls back everything and
	// retries every row. HandleBatchTx must not commit or roll back tx.
	HandleBatchTx(ctx context.Context, tx pgx.Tx, evs []*Event) error
}

// TxBatchHandlerFunc adapts a function to TxBatchHandler.
type TxBatchHandlerFunc func(ctx context.Context, tx pgx.Tx, evs []*Event) error

// HandleBatchTx calls f(ctx, tx, evs).
func (f TxBatchHandlerFunc) HandleBatchTx(ctx context.Context, tx pgx.Tx, evs []*Event) error {
	return f(ctx, tx, evs)
}

// RowErrors is a batch handler's outcome row by row: the error of evs[i]
// at index i, nil for a row processed. Its length must be that of the
// batch; otherwise the whole batch fails (and is retried).
type RowErrors []error

// Error counts the rows that failed and gives the first failure.
func (e RowErrors) Error() string {
	n, first := 0, ""
	for _, err := range e {
		if err != nil {
			if n == 0 {
				first = err.Error()
			}
			n++
		}
	}
	if n == 0 {
		return "no row failed"
	}
	return fmt.Sprintf("%d of %d rows failed, the first: %s", n, len(e), first)
}

// Batch is how a batch route gathers its rows (Policy.Batch): a batch
// holds at most MaxRows rows and MaxBytes bytes (payloads, keys and
// headers; a single row bigger than that goes alone), and never more rows
// than the route's concurrency lets run at once. A batch that is not full
// waits at most MaxWait for more rows, from when its oldest row was ready.
type Batch struct {
	// MaxRows is the most rows in one batch (0 on a batch handler:
	// DefaultBatchRows).
	MaxRows int
	// MaxBytes is the most bytes in one batch (0: no limit).
	MaxBytes int64
	// MaxWait is the longest a batch that is not full waits for more rows
	// (0: a batch goes with the rows there are).
	MaxWait time.Duration
}

// DefaultBatchRows is a batch route's MaxRows when none is given.
const DefaultBatchRows = 100

// MaxBatchRows is the largest Batch.MaxRows accepted.
const MaxBatchRows = 10000

// MaxBatchWait is the longest Batch.MaxWait accepted.
const MaxBatchWait = time.Minute

// validate checks b's values; every error names its field as the routes
// file does.
func (b Batch) validate() []string {
	var errs []string
	if b.MaxRows < 0 || b.MaxRows > MaxBatchRows {
		errs = append(errs, fmt.Sprintf("batch: max_rows: must be between 1 and %d, got %d", MaxBatchRows, b.MaxRows))
	}
	if b.MaxBytes < 0 {
		errs = append(errs, "batch: max_bytes: must not be negative")
	}
	if b.MaxWait < 0 || b.MaxWait > MaxBatchWait {
		errs = append(errs, fmt.Sprintf("batch: max_wait: must be between 0 and %s", MaxBatchWait))
	}
	return errs
}

// Batching sets Policy.Batch: batches of at most maxRows rows and maxBytes
// bytes (0: no limit), waiting at most maxWait for a fuller batch.
func Batching(maxRows int, maxBytes int64, maxWait time.Duration) Option {
	return func(p *Policy) { p.Batch = Batch{MaxRows: maxRows, MaxBytes: maxBytes, MaxWait: maxWait} }
}

// HandleBatch registers the batch handler h for eventType, run as opts say
// (Batching among them; DefaultBatchRows rows otherwise). The registry's
// middleware, made for one event at a time, does not wrap batch handlers.
func (r *Registry) HandleBatch(eventType string, h BatchHandler, opts ...Option) error {
	if h == nil {
		return fmt.Errorf("event type %q: nil handler", eventType)
	}
	return r.addBatch(eventType, plainBatch{h}, false, opts)
}

// HandleTxBatch registers the transactional batch handler h for
// eventType, run as opts say (Batching among them; DefaultBatchRows rows
// otherwise).
func (r *Registry) HandleTxBatch(eventType string, h TxBatchHandler, opts ...Option) error {
	if h == nil {
		return fmt.Errorf("event type %q: nil handler", eventType)
	}
	return r.addBatch(eventType, h, true, opts)
}

func (r *Registry) addBatch(eventType string, h TxBatchHandler, tx bool, opts []Option) error {
	p := policyOf(opts)
	if p.Batch.MaxRows == 0 {
		p.Batch.MaxRows = DefaultBatchRows
	}
	return r.add(eventType, &entry{handler: batchOnly{}, batch: h, tx: tx, policy: p})
}

// plainBatch runs a BatchHandler as a TxBatchHandler given no transaction.
type plainBatch struct{ h BatchHandler }

func (p plainBatch) HandleBatchTx(ctx context.Context, _ pgx.Tx, evs []*Event) error {
	return p.h.HandleBatch(ctx, evs)
}

// batchOnly is a batch route's per-row Handler, which the engine never
// calls (it runs the route's Batch): should anything else, the row is
// retried, not lost.
type batchOnly struct{}

func (batchOnly) Handle(context.Context, *Event) error {
	return errorString("a batch route's rows run in batches (handlers.Route.Batch)")
}

// checkBatch reports the problems of a route's batch settings against its
// kind of handler (batch: a batch handler).
func (p Policy) checkBatch(batch bool) []string {
	errs := p.Batch.validate()
	if p.Batch.MaxRows > 0 && !batch {
		errs = append(errs, "batch: only for batch handlers (HandleBatch, HandleTxBatch; http and river routes)")
	}
	return errs
}
