package driver

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

var (
	markStartsSQL  = load("mark_starts.sql")
	markStartsStmt = positional(markStartsSQL) // named arguments made positional once
	suspectsSQL    = load("suspects.sql")
)

// ClaimBits is one claim's start bits (a row of inbox_starts): bit
// claim_pos - 1 is set for each of its rows recorded started. A version
// the database already has (or a later one) is left as it is.
type ClaimBits struct {
	Token   int64
	Bits    []byte
	Version int64
}

// StartMarks is one start mark statement (sql/mark_starts.sql).
type StartMarks struct {
	Claims []ClaimBits // start bits to write
	// Unmark are rows whose claim marked them started (inbox.started) and
	// whose handlers do not run: the mark is cleared.
	Unmark []Lease
	// DoneTokens are claims whose rows are all done: their starts rows go.
	DoneTokens []int64
}

// MarkStarts writes m in one statement.
func MarkStarts(ctx context.Context, db DB, m StartMarks) error {
	tokens := make([]int64, len(m.Claims))
	bits := make([][]byte, len(m.Claims))
	versions := make([]int64, len(m.Claims))
	for i, c := range m.Claims {
		tokens[i], bits[i], versions[i] = c.Token, c.Bits, c.Version
		if bits[i] == nil {
			bits[i] = []byte{} // no bit set: empty, not NULL (the column is NOT NULL)
		}
	}
	unmarkIDs := make([]int64, len(m.Unmark))
	unmarkTokens := make([]int64, len(m.Unmark))
	for i, u := range m.Unmark {
		unmarkIDs[i], unmarkTokens[i] = u.ID, u.Token
	}
	args, err := markStartsStmt.args(pgx.NamedArgs{
		"tokens": tokens, "bits": bits, "versions": versions,
		"unmark_ids": unmarkIDs, "unmark_tokens": unmarkTokens, "done_tokens": nonNil(m.DoneTokens),
	})
	if err != nil {
		return fmt.Errorf("record handler starts: %w", err)
	}
	if _, err := db.Exec(ctx, markStartsStmt.sql, args...); err != nil {
		return fmt.Errorf("record handler starts: %w", err)
	}
	return nil
}

// Suspects returns which rows of ids were last rescued after a started
// attempt, their last_error beginning with expiredPrefix (the rescuer's
// words, sql/suspects.sql).
func Suspects(ctx context.Context, db DB, ids []int64, expiredPrefix string) ([]int64, error) {
	rows, err := db.Query(ctx, suspectsSQL, pgx.NamedArgs{"ids": ids, "expired_prefix": expiredPrefix})
	if err != nil {
		return nil, fmt.Errorf("look up suspects: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("look up suspects: %w", err)
	}
	return found, nil
}
