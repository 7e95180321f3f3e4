// Package workerdiag holds the worker's diagnostics that are no part of
// its public API: tools of this repository (cmd/inboxd-bench) reach them
// here, and embedders cannot. Package worker registers them when it is
// linked in (its init), since they need the pool's internals.
package workerdiag

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/handlers"
)

// ExplainClaimFunc is the worker's explain of a claim (see ExplainClaim).
type ExplainClaimFunc func(ctx context.Context, db *pgxpool.Pool, registry *handlers.Registry) (string, error)

var explainClaim ExplainClaimFunc

// SetExplainClaim registers the worker's explain of a claim; package
// worker calls it at init.
func SetExplainClaim(f ExplainClaimFunc) { explainClaim = f }

// ExplainClaim returns the plan PostgreSQL follows for the claim a pool
// with registry and the default worker config would make now on db, from
// EXPLAIN (ANALYZE, BUFFERS), with the claims' session settings. Nothing
// is claimed (the claim is rolled back).
func ExplainClaim(ctx context.Context, db *pgxpool.Pool, registry *handlers.Registry) (string, error) {
	if explainClaim == nil {
		return "", errors.New("workerdiag: package worker is not linked in")
	}
	return explainClaim(ctx, db, registry)
}
