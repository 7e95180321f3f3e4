package worker

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/workerdiag"
)

// The diagnostics tools of this repository need, kept out of the public
// API (internal/workerdiag).
func init() {
	workerdiag.SetExplainClaim(func(ctx context.Context, db *pgxpool.Pool, registry *handlers.Registry) (string, error) {
		return explainClaim(ctx, db, registry, Config{})
	})
}
