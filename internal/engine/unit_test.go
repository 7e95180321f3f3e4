package engine

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/worker"
)

// unitPool returns a Pool that is never run, on a database pool that never
// connects: for the parts of the engine that decide without a database.
func unitPool(t *testing.T, reg *handlers.Registry, cfg worker.Config) *Pool {
	t.Helper()
	db, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	p, err := New(db, reg, cfg, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newJob returns a job for row id of eventType as a claim with token
// would make it, its lease fresh and its start known to the database (so
// that no start mark is needed to run it).
func newJob(p *Pool, id int64, eventType string, token int64) *job {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &job{
		ctx: ctx, cancel: cancel, token: token,
		row:        claimedRow{driver.ClaimedRow{ID: id, Rank: id, EventID: "e", EventType: eventType, Attempts: 1, Payload: []byte("{}")}},
		size:       2,
		leaseUntil: time.Now().Add(p.cfg.Lease),
		dbStarted:  true,
	}
}
