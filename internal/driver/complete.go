package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/driver/status"
)

// completeSQL and completeTxSQL are sql/complete.sql and
// sql/complete_tx.sql in their two variants (see Variant); completeStmt and
// completeTxStmt the same with their named arguments made positional.
// completeHistoryStmt is sql/complete.sql with the history's part, for
// batches that write attempts to the rows' histories.
var (
	completeSQL         = renderVariants("complete.sql", false)
	completeTxSQL       = renderVariants("complete_tx.sql", false)
	completeStmt        = positionalVariants(completeSQL)
	completeTxStmt      = positionalVariants(completeTxSQL)
	completeHistoryStmt = positionalVariants(renderVariants("complete.sql", true))
)

// Recorded is what a completion writes to its rows' histories (migration
// 017): the attempts of one worker.
type Recorded struct {
	// Worker is the worker that ran the attempts.
	Worker string
	// Attempts are the attempts written; an attempt of a row the
	// completion does not apply (fenced) is not.
	Attempts []Attempt
}

// Completion is one row's outcome for Complete.
type Completion struct {
	ID     int64
	Token  int64         // the lease token it was claimed with: the write is fenced by it
	Status status.Status // processed, received (a retry or a release) or dead
	Delay  time.Duration // for received: how long until it is due
	Error  *string       // last_error (nil: left as it is)
	// Release: the row returns unattempted; its attempt is not counted.
	Release bool
	// Chained: the next row of its key was claimed with it and is run or
	// given back by the worker: the completion need not unpark it.
	Chained bool
}

// Ordering is what the ordered routes' part of the completions needs: the
// types of ordered routes, and those whose dead rows block their key. No
// ordered type: the Plain variant.
type Ordering struct {
	OrderedTypes, BlockingTypes []string
}

// Complete writes the outcomes of batch in one fenced statement
// (sql/complete.sql) and returns the ids it applied (the others' leases
// were lost). batch should be sorted by id: the statement locks the rows
// in that order.
func Complete(ctx context.Context, db DB, batch []Completion, o Ordering) ([]int64, error) {
	return CompleteRecorded(ctx, db, batch, o, Recorded{})
}

// CompleteRecorded is Complete that also writes h's attempts to the rows'
// histories, in the same statement (sql/complete.sql with .History): only
// those of the rows it applies, and only with its outcomes. Without
// attempts it runs Complete's own statement.
func CompleteRecorded(ctx context.Context, db DB, batch []Completion, o Ordering, h Recorded) ([]int64, error) {
	n := len(batch)
	// Arrays whose elements are not boxed one by one (see textArray); a
	// pointer or a bool in an interface takes no allocation anyway.
	ids := make(int64Array, n)
	tokens := make(int64Array, n)
	statuses := make(textArray, n)
	delays := make(int64Array, n)
	errs := make([]*string, n)
	deltas := make(int32Array, n)
	chained := make([]bool, n)
	for i, c := range batch {
		ids[i], tokens[i], statuses[i], delays[i], errs[i] = c.ID, c.Token, string(c.Status), c.Delay.Milliseconds(), c.Error
		chained[i] = c.Chained
		if c.Release {
			deltas[i] = -1
		}
	}
	q := completeStmt[Variant(o.OrderedTypes)]
	values := pgx.NamedArgs{
		"ids": ids, "tokens": tokens, "statuses": statuses, "delays_ms": delays,
		"errors": errs, "attempts_delta": deltas, "chained": chained,
		"ordered_types": nonNil(o.OrderedTypes), "blocking_types": nonNil(o.BlockingTypes),
	}
	if len(h.Attempts) > 0 {
		q = completeHistoryStmt[Variant(o.OrderedTypes)]
		a := attemptArrays(h.Attempts)
		values["history_worker"], values["history_ids"], values["history_attempts"] = h.Worker, a.ids, a.nums
		values["history_started"], values["history_finished"] = a.started, a.finished
		values["history_outcomes"], values["history_errors"] = a.outcomes, a.errs
	}
	args, err := q.args(values)
	if err != nil {
		return nil, fmt.Errorf("complete batch: %w", err)
	}
	rows, err := db.Query(ctx, q.sql, args...)
	if err != nil {
		return nil, fmt.Errorf("complete batch: %w", err)
	}
	// Scanned into one variable through one argument list, rather than by
	// pgx.RowTo: each allocates per row.
	applied := make([]int64, 0, n)
	var id int64
	dest := []any{&id}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return nil, fmt.Errorf("complete batch: %w", err)
		}
		applied = append(applied, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("complete batch: %w", err)
	}
	return applied, nil
}

// CompleteTx marks row id processed in tx, a transactional handler's
// transaction, fenced by token (sql/complete_tx.sql); chained as in
// Completion. It reports whether the row was marked (false: the lease was
// lost).
func CompleteTx(ctx context.Context, tx DB, id, token int64, chained bool, o Ordering) (bool, error) {
	q := completeTxStmt[Variant(o.OrderedTypes)]
	args, err := q.args(pgx.NamedArgs{
		"id": id, "token": token, "chained": chained,
		"ordered_types": nonNil(o.OrderedTypes), "blocking_types": nonNil(o.BlockingTypes),
	})
	if err != nil {
		return false, fmt.Errorf("mark processed: %w", err)
	}
	rows, err := tx.Query(ctx, q.sql, args...)
	if err != nil {
		return false, fmt.Errorf("mark processed: %w", err)
	}
	marked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return false, fmt.Errorf("mark processed: %w", err)
	}
	return len(marked) > 0, nil
}
