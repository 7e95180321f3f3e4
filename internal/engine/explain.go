package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/worker"
)

// ExplainClaim returns the plan PostgreSQL follows for the claim a pool
// with registry and cfg would make now on db, from EXPLAIN (ANALYZE,
// BUFFERS), with the claims' session settings. The claim runs in a
// transaction that is rolled back: nothing is claimed. It is a diagnostic
// (cmd/inboxd-bench prints it next to its figures; tests read the indexes
// it walks).
func ExplainClaim(ctx context.Context, db *pgxpool.Pool, registry *handlers.Registry, cfg worker.Config) (string, error) {
	p, err := New(db, registry, cfg, zerolog.Nop(), nil)
	if err != nil {
		return "", err
	}
	req, _, _ := p.claimer.plan()
	tx, err := db.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("explain claim: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, set := range []string{"SET LOCAL enable_bitmapscan = off", "SET LOCAL enable_seqscan = off"} {
		if _, err := tx.Exec(ctx, set); err != nil {
			return "", fmt.Errorf("explain claim: %w", err)
		}
	}
	lines, err := driver.ExplainClaim(ctx, tx, p.claimer.params(req, 0, nil))
	if err != nil {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}
