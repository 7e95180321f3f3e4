package handlers

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Job describes the background job a job route (handler: river) enqueues
// for each of its events.
type Job struct {
	// Kind is the job's kind, which selects the worker that runs it.
	Kind string
	// Queue is the queue the job goes to ("" means the default queue).
	Queue string
	// Priority is the job's priority, 1 (highest) to 4; 0 means the
	// queue's default.
	Priority int
	// MaxAttempts is how many times the job system tries the job; 0 means
	// its default.
	MaxAttempts int
}

// JobInserter enqueues a job for an event within a transaction: the
// transaction that marks the event's inbox row processed, so the job exists
// exactly when the row is processed. The daemon provides one backed by
// River (package handlers/riverjob).
type JobInserter interface {
	// InsertJob enqueues job for ev in tx.
	InsertJob(ctx context.Context, tx pgx.Tx, job Job, ev *Event) error
}

// NewJobRoute returns a transactional handler that enqueues job for every
// event through ins. With the inbox's deduplication in front and the
// insert in the row's own transaction, each unique event becomes exactly
// one job, across redeliveries and crashes.
func NewJobRoute(ins JobInserter, job Job) TxHandler {
	return TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *Event) error {
		return ins.InsertJob(ctx, tx, job, ev)
	})
}

// jobBatchInserter is a JobInserter that also enqueues the jobs of many
// events at once (package handlers/riverjob's Inserter, with River's
// InsertManyTx).
type jobBatchInserter interface {
	InsertJobs(ctx context.Context, tx pgx.Tx, job Job, evs []*Event) error
}

// newJobBatchRoute returns the transactional batch handler of a river
// route with batch: it enqueues job for every event of a batch through
// ins, in the batch's transaction: with one InsertJobs when ins has it,
// else one InsertJob per event. A failed insert fails the whole batch.
func newJobBatchRoute(ins JobInserter, job Job) TxBatchHandler {
	return TxBatchHandlerFunc(func(ctx context.Context, tx pgx.Tx, evs []*Event) error {
		if bi, ok := ins.(jobBatchInserter); ok {
			return bi.InsertJobs(ctx, tx, job, evs)
		}
		for _, ev := range evs {
			if err := ins.InsertJob(ctx, tx, job, ev); err != nil {
				return err
			}
		}
		return nil
	})
}
