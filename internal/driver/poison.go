package driver

import (
	"context"

	"github.com/jackc/pgx/v5"
)

var (
	poisonCandidateSQL = load("poison_candidate.sql")
	poisonSQL          = load("poison.sql")
)

// PoisonCandidate returns the oldest due row not in skip
// (sql/poison_candidate.sql): the first a single-row claim takes, so the
// one that makes it fail. pgx.ErrNoRows when no row is due.
func PoisonCandidate(ctx context.Context, db DB, skip []int64) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, poisonCandidateSQL, pgx.NamedArgs{"skip": nonNil(skip)}).Scan(&id)
	return id, err
}

// Poison dead-letters row id, still received, with reason as its
// last_error (sql/poison.sql), and reports whether it did.
func Poison(ctx context.Context, db DB, id int64, reason string) (bool, error) {
	tag, err := db.Exec(ctx, poisonSQL, pgx.NamedArgs{"id": id, "reason": reason})
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}
