package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	consoleSessionCreateSQL = load("console_session_create.sql")
	consoleSessionGetSQL    = load("console_session_get.sql")
	consoleSessionEndSQL    = load("console_session_end.sql")
	consoleSessionPruneSQL  = load("console_session_prune.sql")
)

// ConsoleSession is a console sign-in as the console_sessions table keeps
// it.
type ConsoleSession struct {
	// IDHash is the SHA-256 of the session id the cookie holds.
	IDHash []byte
	// Operator is the operator's name.
	Operator string
	// TokenTag says which console token signed it in.
	TokenTag []byte
	// ExpiresAt is when it ends by itself.
	ExpiresAt time.Time
}

// CreateConsoleSession records a sign-in (sql/console_session_create.sql).
func CreateConsoleSession(ctx context.Context, db DB, s ConsoleSession) error {
	if _, err := db.Exec(ctx, consoleSessionCreateSQL, pgx.NamedArgs{"id_hash": s.IDHash, "operator": s.Operator,
		"token_tag": s.TokenTag, "expires_at": s.ExpiresAt}); err != nil {
		return fmt.Errorf("create console session: %w", err)
	}
	return nil
}

// GetConsoleSession returns the session of idHash not ended, whether
// expired or not, with the tag of the credential that signed it in; ok is
// false when there is none (sql/console_session_get.sql).
func GetConsoleSession(ctx context.Context, db DB, idHash []byte) (s ConsoleSession, ok bool, err error) {
	s = ConsoleSession{IDHash: idHash}
	err = db.QueryRow(ctx, consoleSessionGetSQL, pgx.NamedArgs{"id_hash": idHash}).
		Scan(&s.Operator, &s.TokenTag, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return ConsoleSession{}, false, nil
	}
	if err != nil {
		return ConsoleSession{}, false, fmt.Errorf("read console session: %w", err)
	}
	return s, true, nil
}

// EndConsoleSession ends the session of idHash (a sign-out) and reports
// whether one was still open (sql/console_session_end.sql).
func EndConsoleSession(ctx context.Context, db DB, idHash []byte) (bool, error) {
	tag, err := db.Exec(ctx, consoleSessionEndSQL, pgx.NamedArgs{"id_hash": idHash})
	if err != nil {
		return false, fmt.Errorf("end console session: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// PruneConsoleSessions deletes the sessions that expired before before
// (sql/console_session_prune.sql) and returns how many.
func PruneConsoleSessions(ctx context.Context, db DB, before time.Time) (int64, error) {
	tag, err := db.Exec(ctx, consoleSessionPruneSQL, pgx.NamedArgs{"before": before})
	if err != nil {
		return 0, fmt.Errorf("prune console sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}
