package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	webhookReplaySQL      = load("webhook_replay.sql")
	webhookReplayPruneSQL = load("webhook_replay_prune.sql")
)

// WebhookFirstSeen records that the webhook source source accepts the body
// whose SHA-256 is sum under eventID, and reports whether it may: false
// when that body was accepted under another event id less than window ago
// (a replay), true when it is new, older than window, or came under the
// same event id (sql/webhook_replay.sql, migration 014).
func WebhookFirstSeen(ctx context.Context, db DB, source string, sum []byte, eventID string, window time.Duration) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, webhookReplaySQL, pgx.NamedArgs{"source": source, "body_sha256": sum,
		"event_id": eventID, "window_ms": window.Milliseconds()}).Scan(&ok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("record webhook body: %w", err)
	}
	return ok, nil
}

// PruneWebhookReplays deletes one batch of at most batch of source's
// replay records older than window and reports how many it deleted
// (sql/webhook_replay_prune.sql).
func PruneWebhookReplays(ctx context.Context, db DB, source string, window time.Duration, batch int) (int64, error) {
	tag, err := db.Exec(ctx, webhookReplayPruneSQL, pgx.NamedArgs{"source": source, "window_ms": window.Milliseconds(), "batch": batch})
	if err != nil {
		return 0, fmt.Errorf("prune webhook replay records: %w", err)
	}
	return tag.RowsAffected(), nil
}
