package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// KeptAttempts is how many attempts a row's history keeps (the newest).
const KeptAttempts = 25

var (
	attemptsInsertSQL = render("attempts_insert.sql", nil, "attempts_record.sql")
	attemptsListSQL   = load("attempts_list.sql")
)

// Attempt is one attempt of a row (migration 017).
type Attempt struct {
	// RowID is the inbox row's id (not read by History).
	RowID int64
	// Attempt is its number, from 1.
	Attempt int
	// StartedAt and FinishedAt bound the handler's run.
	StartedAt, FinishedAt time.Time
	// Worker is the worker that ran it.
	Worker string
	// Outcome is processed, retried, dead or "lease expired".
	Outcome string
	// Error is the attempt's error ("" for none).
	Error string
}

// RecordAttempts writes the attempts of one worker to the rows' histories
// and trims each to its last KeptAttempts (sql/attempts_insert.sql).
func RecordAttempts(ctx context.Context, db DB, worker string, list []Attempt) error {
	a := attemptArrays(list)
	_, err := db.Exec(ctx, attemptsInsertSQL, pgx.NamedArgs{"row_ids": a.ids, "attempts": a.nums, "started": a.started,
		"finished": a.finished, "outcomes": a.outcomes, "errors": a.errs, "worker": worker})
	if err != nil {
		return fmt.Errorf("record attempts: %w", err)
	}
	return nil
}

// attempts is a list of attempts as the statements' arrays, one per
// column of inbox_attempts.
type attempts struct {
	ids               int64Array
	nums              int32Array
	started, finished []time.Time
	outcomes          textArray
	errs              []*string // NULL for none
}

// attemptArrays returns list as the statements' arrays.
func attemptArrays(list []Attempt) attempts {
	n := len(list)
	a := attempts{ids: make(int64Array, n), nums: make(int32Array, n), started: make([]time.Time, n),
		finished: make([]time.Time, n), outcomes: make(textArray, n), errs: make([]*string, n)}
	for i, at := range list {
		a.ids[i], a.nums[i], a.started[i], a.finished[i], a.outcomes[i] = at.RowID, int32(at.Attempt), at.StartedAt, at.FinishedAt, at.Outcome
		if at.Error != "" {
			e := at.Error
			a.errs[i] = &e
		}
	}
	return a
}

// History returns the recorded attempts of the row id, oldest first
// (sql/attempts_list.sql).
func History(ctx context.Context, db DB, id int64) ([]Attempt, error) {
	out, err := queryAll(ctx, db, attemptsListSQL, pgx.NamedArgs{"row_id": id}, func(r pgx.CollectableRow) (Attempt, error) {
		a := Attempt{RowID: id}
		err := r.Scan(&a.Attempt, &a.StartedAt, &a.FinishedAt, &a.Worker, &a.Outcome, &a.Error)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("history of row %d: %w", id, err)
	}
	return out, nil
}

var attemptsSweepSQL = load("attempts_sweep.sql")

// SweepAttempts deletes one batch of at most limit history entries of rows
// that are gone, among the oldest finished after after, and returns the
// batch's last finished_at; ok is false when none is left after after
// (sql/attempts_sweep.sql).
func SweepAttempts(ctx context.Context, db DB, after time.Time, limit int) (last time.Time, ok bool, err error) {
	var t *time.Time
	if err := db.QueryRow(ctx, attemptsSweepSQL, pgx.NamedArgs{"after": after, "limit": limit}).Scan(&t); err != nil {
		return time.Time{}, false, fmt.Errorf("sweep the attempts of deleted rows: %w", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return *t, true, nil
}
