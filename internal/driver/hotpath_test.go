package driver

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// Both variants of each templated statement of the hot path are valid SQL
// for the schema, and only the ordered one touches parked rows.
func TestStatementVariantsPrepare(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for name, variants := range map[string][2]string{"claim": claimSQL, "complete": completeSQL, "complete_tx": completeTxSQL} {
		for i, sql := range variants {
			// Named arguments become $n as pgx sends them.
			sql, _, err := pgx.NamedArgs{}.RewriteQuery(ctx, conn.Conn(), sql, nil)
			if err != nil {
				t.Fatalf("%s[%d]: %v", name, i, err)
			}
			if _, err := conn.Conn().Prepare(ctx, "", sql); err != nil {
				t.Errorf("%s[%d] does not prepare: %v\n%s", name, i, err, sql)
			}
			if parks := strings.Contains(sql, "parked AS ("); parks != (i == WithOrdered) {
				t.Errorf("%s[%d]: mentions parked rows = %v", name, i, parks)
			}
		}
	}
}

// A row's way through the hot path's functions: claimed, renewed, marked
// started, completed (and a completion with a stale token fenced), and a
// poison candidate dead-lettered.
func TestHotPathFunctions(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload)
		VALUES ('s', 'a', 'x', '{}'), ('s', 'b', 'x', '{}'), ('s', 'c', 'x', '{}')`); err != nil {
		t.Fatal(err)
	}
	const token = 42
	c, err := Claim(ctx, db.Pool, ClaimParams{
		Limit: 2, Rooms: []RouteRoom{{Route: "", Room: 2, Idle: 1}}, DefaultOpen: true,
		MaxBytes: 1 << 20, FirstAlways: true, Token: token, Lease: time.Minute, Worker: "w",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rows) != 2 || c.Parked != 0 {
		t.Fatalf("claimed %+v, want 2 rows, none parked", c)
	}
	slices.SortFunc(c.Rows, func(a, b ClaimedRow) int { return int(a.Rank - b.Rank) })
	first, second := c.Rows[0], c.Rows[1]
	if first.Attempts != 1 || !first.Started || second.Started || first.EventType != "x" || first.Source != "s" {
		t.Errorf("claimed rows %+v, %+v: want attempt 1, the first (idle) started", first, second)
	}

	states, err := Renew(ctx, db.Pool, []Lease{{ID: first.ID, Token: token}, {ID: second.ID, Token: token + 1}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if states[first.ID] != Renewed || states[second.ID] != RenewLost {
		t.Errorf("renewal states %v: want %d renewed, %d lost (wrong token)", states, first.ID, second.ID)
	}

	if err := MarkStarts(ctx, db.Pool, StartMarks{Claims: []ClaimBits{{Token: token, Bits: []byte{3}, Version: 1}}}); err != nil {
		t.Fatal(err)
	}
	var bits []byte
	if err := db.Pool.QueryRow(ctx, `SELECT bits FROM inbox_starts WHERE token = $1`, token).Scan(&bits); err != nil || !slices.Equal(bits, []byte{3}) {
		t.Errorf("start bits %v (%v), want [3]", bits, err)
	}
	if err := MarkStarts(ctx, db.Pool, StartMarks{DoneTokens: []int64{token}, Unmark: []Lease{{ID: first.ID, Token: token}}}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox_starts`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d starts rows left (%v), want 0", n, err)
	}

	why := "boom"
	applied, err := Complete(ctx, db.Pool, []Completion{
		{ID: first.ID, Token: token, Status: status.Processed},
		{ID: second.ID, Token: token + 1, Status: status.Received, Error: &why},
	}, Ordering{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(applied, []int64{first.ID}) {
		t.Errorf("applied %v, want only %d (the other's token is stale)", applied, first.ID)
	}
	marked, err := CompleteTx(ctx, db.Pool, second.ID, token, false, Ordering{OrderedTypes: []string{"x"}})
	if err != nil || !marked {
		t.Errorf("CompleteTx = %v, %v; want marked", marked, err)
	}

	if found, err := Suspects(ctx, db.Pool, []int64{first.ID, second.ID}, "lease expired"); err != nil || len(found) != 0 {
		t.Errorf("suspects %v (%v), want none", found, err)
	}

	id, err := PoisonCandidate(ctx, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PoisonCandidate(ctx, db.Pool, []int64{id}); err != pgx.ErrNoRows {
		t.Errorf("PoisonCandidate skipping the only due row: %v, want no rows", err)
	}
	if done, err := Poison(ctx, db.Pool, id, "bad data"); err != nil || !done {
		t.Errorf("Poison = %v, %v; want done", done, err)
	}
	var st string
	if err := db.Pool.QueryRow(ctx, `SELECT status FROM inbox WHERE id = $1`, id).Scan(&st); err != nil || st != "dead" {
		t.Errorf("poisoned row is %q (%v), want dead", st, err)
	}
}

// The ordered variant: a key's head comes with the next row of its key
// (Pred), and a claim that finds nothing returns no row (the statement's
// one row then carries only the parked count).
func TestClaimOrderedChain(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, key, payload)
		VALUES ('s', 'a', 'o', 'k', '{}'), ('s', 'b', 'o', 'k', '{}')`); err != nil {
		t.Fatal(err)
	}
	params := ClaimParams{
		Limit: 10, Rooms: []RouteRoom{{Route: "o", Room: 10, Idle: 10}}, RoutedTypes: []string{"o"}, OpenTypes: []string{"o"},
		OrderedTypes: []string{"o"}, BlockingTypes: []string{"o"}, MaxBytes: 1 << 20, FirstAlways: true,
		Chain: 16, Token: 1, Lease: time.Minute, Worker: "w",
	}
	c, err := Claim(ctx, db.Pool, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rows) != 2 {
		t.Fatalf("claimed %+v, want the head and its follower", c)
	}
	slices.SortFunc(c.Rows, func(a, b ClaimedRow) int { return int(a.Rank - b.Rank) })
	if head, next := c.Rows[0], c.Rows[1]; head.Pred != 0 || next.Pred != head.ID || string(next.Key) != "k" {
		t.Errorf("head %+v, follower %+v: want the follower's pred to be the head", head, next)
	}
	params.Token = 2
	if c, err := Claim(ctx, db.Pool, params); err != nil || len(c.Rows) != 0 || c.Parked != 0 {
		t.Errorf("second claim: %+v, %v; want nothing", c, err)
	}
}

// A claim none of whose rows was started through its bits (all marked by
// the claim, one of them now unmarked beside a suspect) has empty bits: the
// statement must store them, not fail on a NULL (which made the suspect's
// mark fail and be retried for seconds, and the rows beside it share its
// crash).
func TestMarkStartsWithEmptyBits(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	for _, bits := range [][]byte{nil, {}} {
		if err := MarkStarts(ctx, db.Pool, StartMarks{Claims: []ClaimBits{{Token: 7, Bits: bits, Version: int64(len(bits)) + 1}}}); err != nil {
			t.Fatalf("MarkStarts with bits %#v: %v", bits, err)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT length(bits) FROM inbox_starts WHERE token = 7`).Scan(&n); err != nil || n != 0 {
		t.Errorf("stored bits of length %d (%v), want an empty value", n, err)
	}
}
