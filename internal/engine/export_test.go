package engine

import (
	"context"
)

// Rescue runs one rescue as the rescuer does every RescueInterval (rows of
// expired leases back to received or dead; the rows behind dead rows of
// routes that skip them unparked), and reports how many rows it moved.
func (p *Pool) Rescue(ctx context.Context) (int, error) {
	return newMaintenance(p).Rescuer.Rescue(ctx)
}

// Unpark runs the sweeper's unpark sweep once (parked rows of ordered
// routes that wait for nothing released), and reports how many rows it
// unparked.
func (p *Pool) Unpark(ctx context.Context) (int, error) {
	return newMaintenance(p).Sweeper.Unpark(ctx)
}

// DropOrphanStarts runs the sweeper's deletion of orphaned start bits
// once.
func (p *Pool) DropOrphanStarts(ctx context.Context) error {
	return newMaintenance(p).Sweeper.DropOrphanStarts(ctx)
}
