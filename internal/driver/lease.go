package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var renewSQL = load("renew.sql")

// Lease is one claimed row's lease: the row and its lease token.
type Lease struct {
	ID    int64
	Token int64
}

// RenewState is what a renewal found for one row.
type RenewState uint8

const (
	// Renewed: the lease was extended.
	Renewed RenewState = iota
	// RenewBusy: still held with this token, but locked by another
	// statement at that moment (the holder's own completion or commit,
	// typically); to be retried.
	RenewBusy
	// RenewLost: fenced: the row was rescued or claimed by another worker.
	RenewLost
)

// Renew extends each lease of batch to lease from now, skipping rows
// locked by another statement (sql/renew.sql), and returns what it found
// for each row, by id.
func Renew(ctx context.Context, db DB, batch []Lease, lease time.Duration) (map[int64]RenewState, error) {
	ids := make([]int64, len(batch))
	tokens := make([]int64, len(batch))
	for i, l := range batch {
		ids[i], tokens[i] = l.ID, l.Token
	}
	rows, err := db.Query(ctx, renewSQL, pgx.NamedArgs{
		"ids": ids, "tokens": tokens, "lease_ms": lease.Milliseconds(),
	})
	if err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	states := make(map[int64]RenewState, len(batch))
	var (
		id            int64
		renewed, held bool
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &renewed, &held}, func() error {
		switch {
		case renewed:
			states[id] = Renewed
		case held:
			states[id] = RenewBusy
		default:
			states[id] = RenewLost
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	return states, nil
}
