package inboxd_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// The Go API pauses a route (its rows stay received while the engine
// runs), lists it with who and why, and resumes it (its rows are then
// processed).
func TestPauseAndResumeRoute(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	reg := handlers.NewRegistry()
	if err := reg.Handle("greeting", handlers.Ignore()); err != nil {
		t.Fatal(err)
	}
	ib, err := inboxd.New(testConfig(db.Pool, reg, zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ib.PauseRoute(ctx, "greeting", "alice", "endpoint down"); err != nil {
		t.Fatal(err)
	}
	paused, err := ib.PausedRoutes(ctx)
	if err != nil || len(paused) != 1 || paused[0].Route != "greeting" || paused[0].PausedBy != "alice" || paused[0].Reason != "endpoint down" {
		t.Fatalf("PausedRoutes = %+v, %v", paused, err)
	}
	r := start(t, ib)
	insert(t, db.Pool, "greeting", "g1")
	insert(t, db.Pool, "other", "o1")
	waitFor(t, 10*time.Second, "the unpaused default route's row handled", func() bool {
		s, _ := rowState(t, db.Pool, "o1")
		return s == "dead" // the default route of testConfig's registry: dead
	})
	if s, _ := rowState(t, db.Pool, "g1"); s != "received" {
		t.Fatalf("row of the paused route is %s, want received", s)
	}
	if was, err := ib.ResumeRoute(ctx, "greeting"); err != nil || !was {
		t.Fatalf("ResumeRoute = %v, %v", was, err)
	}
	waitFor(t, 10*time.Second, "the resumed route's row processed", func() bool {
		s, _ := rowState(t, db.Pool, "g1")
		return s == "processed"
	})
	if was, err := ib.ResumeRoute(ctx, inboxd.DefaultRoute); err != nil || was {
		t.Fatalf("ResumeRoute of a route not paused = %v, %v; want false", was, err)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
