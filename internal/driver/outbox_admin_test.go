package driver

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// The outbox commands' statements never read published rows: with the
// planner kept off sequential scans, every plan reads the outbox through a
// partial index (pending or dead) or the primary key, never a Seq Scan of
// the outbox, so they stay fast on a table of millions of published rows.
// (outbox_admin_show_event.sql is the one that reads the table, and says
// so.)
func TestOutboxAdminStatementsReadThePartialIndexes(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPlain(t).Pool // plans name the unpartitioned indexes
	ctx := context.Background()
	if _, err := db.Exec(ctx, `
		INSERT INTO outbox (destination, event_type, key, status, published_at)
		SELECT 'kafka:orders', 't', 'k' || (g % 100), 'published', now() FROM generate_series(1, 20000) AS g;
		INSERT INTO outbox (destination, event_type, key, status, last_error)
		SELECT 'kafka:orders', 't', 'k' || g, 'dead', 'too large' FROM generate_series(1, 20) AS g;
		INSERT INTO outbox (destination, event_type, key) SELECT 'nats:a', 't', 'k' || g FROM generate_series(1, 20) AS g;
		ANALYZE outbox`); err != nil {
		t.Fatal(err)
	}
	f := FailedFilter{Source: "kafka:orders", EventType: "t", Error: "large"}
	withLimit := func(a pgx.NamedArgs, limit int) pgx.NamedArgs {
		a["limit"] = limit
		return a
	}
	for _, c := range []struct {
		name string
		sql  string
		args pgx.NamedArgs
		want string
	}{
		{"destinations", outboxDestinationsSQL, nil, "outbox_pending_idx"},
		{"destinations", outboxDestinationsSQL, nil, "outbox_dead_idx"},
		{"range", outboxRangeSQL[OutboxDead], pgx.NamedArgs{"after": 0, "ids": nil, "limit": 1000}, "outbox_dead_idx"},
		{"range pending", outboxRangeSQL[OutboxPending], pgx.NamedArgs{"after": 0, "ids": nil, "limit": 1000}, "outbox_pending_idx"},
		{"match", outboxMatchSQL[OutboxDead], f.args(0, 1000), "outbox_dead_idx"},
		{"match pending", outboxMatchSQL[OutboxPending], f.args(0, 1000), "outbox_pending_idx"},
		{"dead", outboxDeadSQL, withLimit(f.args(0, math.MaxInt64), 50), "outbox_dead_idx"},
		{"requeue", outboxRequeueSQL, f.args(0, 1000), "outbox_dead_idx"},
		{"discard", outboxDiscardSQL[OutboxDead], f.args(0, 1000), "outbox_dead_idx"},
		{"discard pending", outboxDiscardSQL[OutboxPending], f.args(0, 1000), "outbox_pending_idx"},
		{"show", outboxShowSQL, pgx.NamedArgs{"id": 1}, "outbox_pkey"},
		{"rows by id", outboxRowsByIDSQL, pgx.NamedArgs{"ids": []int64{1, 2}}, "outbox_pkey"},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := planWithoutSeqScans(t, db, c.sql, c.args)
			if !strings.Contains(plan, c.want) || strings.Contains(plan, "Seq Scan on outbox ") {
				t.Errorf("plan does not read %s only:\n%s", c.want, plan)
			}
		})
	}
}

// ReadOutboxReport counts pending and dead rows per destination, gives the
// table estimate, the shards by holder (the expired ones as nobody's) and
// the relays seen within the minute.
func TestReadOutboxReport(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	if _, err := db.Exec(ctx, `
		INSERT INTO outbox (destination, event_type, status, created_at) VALUES
		  ('kafka:a', 't', 'pending', now() - interval '10 minutes'),
		  ('kafka:a', 't', 'pending', now()),
		  ('kafka:a', 't', 'dead', now()),
		  ('nats:b', 't', 'dead', now()),
		  ('nats:b', 't', 'published', now());
		UPDATE outbox_shards SET owner = 'r1', token = 3, expires_at = now() + interval '20 seconds' WHERE shard < 10;
		UPDATE outbox_shards SET owner = 'r2', token = 4, expires_at = now() - interval '1 second' WHERE shard >= 30;
		INSERT INTO outbox_relays VALUES ('r1', now()), ('r2', now() - interval '5 minutes')`); err != nil {
		t.Fatal(err)
	}
	s, err := ReadOutboxReport(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Destinations) != 2 {
		t.Fatalf("destinations = %+v", s.Destinations)
	}
	a, b := s.Destinations[0], s.Destinations[1]
	if a.Destination != "kafka:a" || a.Pending != 2 || a.Dead != 1 || a.OldestPendingAge.Minutes() < 9 || a.OldestPendingAge.Minutes() > 11 {
		t.Errorf("kafka:a = %+v", a)
	}
	if b.Destination != "nats:b" || b.Pending != 0 || b.Dead != 1 || b.OldestPendingAge != 0 {
		t.Errorf("nats:b = %+v", b)
	}
	if len(s.Shards) != 2 || s.Shards[0].Owner != "r1" || s.Shards[0].Shards != 10 || s.Shards[0].FirstExpiry.IsZero() ||
		s.Shards[1].Owner != "" || s.Shards[1].Shards != 22 {
		t.Errorf("shards = %+v", s.Shards)
	}
	if len(s.Relays) != 2 || !s.Relays[0].Alive || s.Relays[1].Alive {
		t.Errorf("relays = %+v", s.Relays)
	}
}
