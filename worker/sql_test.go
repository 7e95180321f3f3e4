package worker

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/workerdiag"
)

// Both variants of each templated statement are valid SQL for the schema,
// and only the ordered one touches parked rows.
func TestStatementVariantsPrepare(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn, err := b.db.Pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for name, variants := range map[string][2]string{"claim": driver.ClaimSQL, "complete": driver.CompleteSQL, "complete_tx": driver.CompleteTxSQL} {
		for i, sql := range variants {
			// Named arguments become $n as pgx sends them.
			sql, _, err := pgx.NamedArgs{}.RewriteQuery(context.Background(), conn.Conn(), sql, nil)
			if err != nil {
				t.Fatalf("%s[%d]: %v", name, i, err)
			}
			if _, err := conn.Conn().Prepare(context.Background(), "", sql); err != nil {
				t.Errorf("%s[%d] does not prepare: %v\n%s", name, i, err, sql)
			}
			if parks := strings.Contains(sql, "parked AS ("); parks != (i == driver.WithOrdered) {
				t.Errorf("%s[%d]: mentions parked rows = %v", name, i, parks)
			}
		}
	}
}

// ExplainClaim shows the claim's plan, reading the received index in
// order, and claims nothing; the tools reach it through
// internal/workerdiag, where package worker registers it.
func TestExplainClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.reg.Handle("x", handlers.Ignore()); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "x", ids("e", 50)...)
	plan, err := workerdiag.ExplainClaim(context.Background(), b.db.Pool, b.reg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "inbox_received_idx") || !strings.Contains(plan, "Execution Time") {
		t.Errorf("plan does not read the received index or was not analyzed:\n%s", plan)
	}
	if n := b.countStatus(t, "received"); n != 50 {
		t.Errorf("%d rows received after ExplainClaim, want all 50", n)
	}
}
