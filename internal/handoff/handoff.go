// Package handoff is the contract of the hand-off at ingest between the
// sources' one writer (package ingest) and the engine's pool
// (internal/engine): the rows a batch stores go to the pool's idle
// handlers, reserved for them, instead of waiting for a claim
// (docs/performance.md).
package handoff

import (
	"context"

	"github.com/inboxd/inboxd/internal/driver"
)

// HandOff is the worker pool of the same process, when the sources may
// hand it rows as they are stored (the engine's pool implements it). Each
// batch write asks Reserve which of its rows the pool's idle handlers
// take; the insert writes those reserved for them (driver.InsertBatch);
// once it has committed, Deliver hands over the reserved rows it inserted
// (duplicates are not), and if it failed, Cancel gives the room back.
// Every source's writes go through ingest's one writer, so every source
// hands off. The Inboxd passes it to the sources as source.Env.HandOff.
type HandOff interface {
	// Reserve returns the reservation of the rows the pool takes (nil:
	// none).
	Reserve(rows []driver.NewRow) *driver.Reservation
	// Deliver hands over the reserved rows the committed insert wrote.
	Deliver(ctx context.Context, r *driver.Reservation, rows []driver.NewRow, got []driver.Reserved)
	// Cancel ends a reservation whose insert failed.
	Cancel(r *driver.Reservation)
}
