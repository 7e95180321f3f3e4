package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/worker"
)

// ExplainClaim shows the claim's plan, reading the received index in
// order, and claims nothing (cmd/inboxd-bench calls it with the default
// worker.Config).
func TestExplainClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.reg.Handle("x", handlers.Ignore()); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "x", ids("e", 50)...)
	plan, err := ExplainClaim(context.Background(), b.db.Pool, b.reg, worker.Config{})
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
