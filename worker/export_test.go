package worker

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/handlers"
)

// Rescue runs one rescue as the rescuer does every RescueInterval (rows of
// expired leases back to received or dead; the rows behind dead rows of
// routes that skip them unparked), and reports how many rows it moved.
func (p *Pool) Rescue(ctx context.Context) (int, error) {
	return newMaintenance(p).rescuer.rescue(ctx)
}

// Unpark runs the sweeper's unpark sweep once (parked rows of ordered
// routes that wait for nothing released), and reports how many rows it
// unparked.
func (p *Pool) Unpark(ctx context.Context) (int, error) {
	return newMaintenance(p).sweeper.unpark(ctx)
}

// DropOrphanStarts runs the sweeper's deletion of orphaned start bits
// once.
func (p *Pool) DropOrphanStarts(ctx context.Context) error {
	return newMaintenance(p).sweeper.dropOrphanStarts(ctx)
}

// ExplainClaim is explainClaim, for the tests that read the claim's plan.
func ExplainClaim(ctx context.Context, db *pgxpool.Pool, registry *handlers.Registry, cfg Config) (string, error) {
	return explainClaim(ctx, db, registry, cfg)
}
