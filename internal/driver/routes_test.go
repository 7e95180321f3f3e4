package driver

import (
	"context"
	"testing"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// Pausing is shared state: listed until resumed; a second pause keeps the
// first pauser; resuming a route that is not paused says so.
func TestPauseAndResumeRoutes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	if err := PauseRoute(ctx, db, "order.paid", "alice", "provider down"); err != nil {
		t.Fatal(err)
	}
	if err := PauseRoute(ctx, db, "order.paid", "bob", "still down"); err != nil {
		t.Fatal(err)
	}
	if err := PauseRoute(ctx, db, DefaultRoute, "alice", ""); err != nil {
		t.Fatal(err)
	}
	got, err := PausedRoutes(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Route != DefaultRoute || got[1].Route != "order.paid" || got[1].PausedBy != "alice" ||
		got[1].Reason != "still down" || got[1].PausedAt.IsZero() {
		t.Fatalf("paused routes = %+v", got)
	}
	if was, err := ResumeRoute(ctx, db, "order.paid"); err != nil || !was {
		t.Fatalf("resume: %v, %v", was, err)
	}
	if was, err := ResumeRoute(ctx, db, "order.paid"); err != nil || was {
		t.Fatalf("second resume: %v, %v; want not paused", was, err)
	}
	if got, _ := PausedRoutes(ctx, db); len(got) != 1 {
		t.Fatalf("after resume: %+v", got)
	}
}
