package driver

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// claimSQL is sql/claim.sql in its two variants (see Variant), with the
// history's part (a lapsed reservation's attempt written to its history);
// claimNoHistoryStmt the same without it, for ClaimParams.NoHistory.
var (
	claimSQL           = renderVariants("claim.sql", true)
	claimStmt          = positionalVariants(claimSQL) // its named arguments made positional once
	claimNoHistoryStmt = positionalVariants(renderVariants("claim.sql", false))
)

// ClaimParams is what one claim (sql/claim.sql) asks for.
type ClaimParams struct {
	Limit  int // most rows
	Window int // most due rows read and locked (0: Limit); heads, whose chains fill the rest
	// Rooms is, per route with room, how many rows it may take and how
	// many of them start at once (marked started by the claim).
	Rooms         []RouteRoom
	RoutedTypes   []string // the event types with a route of their own
	OpenTypes     []string // routed types with room
	FullTypes     []string // routed types without room
	DefaultOpen   bool     // the default route (every other type) has room
	OrderedTypes  []string // types of ordered routes; any makes the claim the WithOrdered variant
	BlockingTypes []string // types of ordered routes whose dead rows block their key
	MaxBytes      int64    // most bytes of rows (payloads, keys, headers)
	FirstAlways   bool     // the first row even if it alone exceeds MaxBytes
	Only          int64    // just this row (0: any)
	Chain         int      // most rows of an ordered key claimed behind its head (0: the head alone)
	Skip          []int64  // rows never claimed (their data makes claims fail)
	Token         int64    // the lease token of the claimed rows
	Lease         time.Duration
	Worker        string // locked_by
	// ExpiredPrefix begins the last_error written on a lapsed reservation
	// the claim takes, as the rescuer writes it (RescueParams.ExpiredPrefix).
	ExpiredPrefix string
	// NoHistory leaves the history's part out of the statement: a lapsed
	// reservation's attempt is not written to its history. Only for
	// measuring what the history costs (engine.Pool.WithoutHistory).
	NoHistory bool
}

// RouteRoom is one route's room in a claim: the route (its event type, ""
// for the default route), how many rows it may take, and how many of them
// start at once.
type RouteRoom struct {
	Route      string
	Room, Idle int
}

// ClaimedRow is a row as returned by the claim statement.
type ClaimedRow struct {
	Rank       int64 // position in the claim's order, from 1
	ID         int64
	Source     string
	EventID    string
	EventType  string
	Key        []byte
	Payload    []byte
	Headers    []byte
	Attempts   int
	ReceivedAt time.Time
	Started    bool // handed straight to an idle handler: the database counts it started
	// Pred is the row before it in its key's chain, claimed by the same
	// statement (0 for every row that is not a chain's follower): it may
	// start once Pred ended so that its key may go on.
	Pred int64
}

// Claimed is what a claim took: its rows in the order the statement
// returned them, and how many rows it parked (rows of ordered keys waiting
// behind an earlier row).
type Claimed struct {
	Rows   []ClaimedRow
	Parked int64
}

// Claim runs the claim statement (sql/claim.sql) on db. The statement is
// planned with its values every time (the caller's sessions set
// plan_cache_mode), and db's sessions decide the scans the planner may
// choose.
func Claim(ctx context.Context, db DB, p ClaimParams) (Claimed, error) {
	q := claimStmt[Variant(p.OrderedTypes)]
	if p.NoHistory {
		q = claimNoHistoryStmt[Variant(p.OrderedTypes)]
	}
	args, err := q.args(p.args())
	if err != nil {
		return Claimed{}, fmt.Errorf("claim batch: %w", err)
	}
	rows, err := db.Query(ctx, q.sql, args...)
	if err != nil {
		return Claimed{}, fmt.Errorf("claim batch: %w", err)
	}
	var (
		out = Claimed{Rows: make([]ClaimedRow, 0, p.Limit)}
		r   ClaimedRow
		// NULL in the one row of an ordered claim that claimed nothing.
		id, rank, pred          pgtype.Int8
		attempt                 pgtype.Int4
		recvAt                  pgtype.Timestamptz
		started                 pgtype.Bool
		source, eventID, evType pgtype.Text
	)
	_, err = pgx.ForEachRow(rows, []any{&out.Parked, &rank, &pred, &id, &source, &eventID, &evType, &r.Key, &r.Payload,
		&r.Headers, &attempt, &recvAt, &started}, func() error {
		if !id.Valid {
			return nil // none claimed: the row only carries the parked count
		}
		out.Rows = append(out.Rows, ClaimedRow{
			Rank: rank.Int64, ID: id.Int64, Source: source.String, EventID: eventID.String, EventType: evType.String,
			Key: r.Key, Payload: r.Payload, Headers: r.Headers,
			Attempts: int(attempt.Int32), ReceivedAt: recvAt.Time, Started: started.Bool, Pred: pred.Int64,
		})
		return nil
	})
	if err != nil {
		return Claimed{}, fmt.Errorf("claim batch: %w", err)
	}
	return out, nil
}

// ExplainClaim returns the plan of the claim p asks for, from EXPLAIN
// (ANALYZE, BUFFERS), one line per element. The statement runs: db is a
// transaction that the caller rolls back.
func ExplainClaim(ctx context.Context, db DB, p ClaimParams) ([]string, error) {
	rows, err := db.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS)\n"+claimSQL[Variant(p.OrderedTypes)], p.args())
	if err != nil {
		return nil, fmt.Errorf("explain claim: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("explain claim: %w", err)
	}
	return lines, nil
}

// args are the claim statement's arguments.
func (p ClaimParams) args() pgx.NamedArgs {
	roomRoutes := make([]string, len(p.Rooms))
	roomCounts := make([]int32, len(p.Rooms))
	idleCounts := make([]int32, len(p.Rooms))
	for i, r := range p.Rooms {
		roomRoutes[i], roomCounts[i], idleCounts[i] = r.Route, int32(r.Room), int32(r.Idle)
	}
	return pgx.NamedArgs{
		"limit":          p.Limit,
		"window":         cmp.Or(p.Window, p.Limit),
		"room_routes":    roomRoutes,
		"room_counts":    roomCounts,
		"idle_counts":    idleCounts,
		"routed_types":   nonNil(p.RoutedTypes),
		"open_types":     nonNil(p.OpenTypes),
		"full_types":     nonNil(p.FullTypes),
		"default_open":   p.DefaultOpen,
		"ordered_types":  nonNil(p.OrderedTypes),
		"blocking_types": nonNil(p.BlockingTypes),
		"max_bytes":      p.MaxBytes,
		"first_always":   p.FirstAlways,
		"only":           p.Only,
		"chain":          p.Chain,
		"skip":           nonNil(p.Skip),
		"token":          p.Token,
		"lease_ms":       p.Lease.Milliseconds(),
		"worker":         p.Worker,
		"expired_prefix": p.ExpiredPrefix,
	}
}

// nonNil returns s, or an empty slice for nil (a NULL array would make
// `= ANY` unknown, and `<> ALL` too).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
