package driver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// insertKeyed inserts events rows of type typ for each of keys keys
// ("k0000:000", …), oldest first.
func insertKeyed(t *testing.T, db DB, typ string, keys, events int) {
	t.Helper()
	var srcs, evIDs, types []string
	var keyVals [][]byte
	for seq := range events {
		for k := range keys {
			srcs = append(srcs, "test")
			evIDs = append(evIDs, fmt.Sprintf("k%04d:%03d", k, seq))
			types = append(types, typ)
			keyVals = append(keyVals, []byte(fmt.Sprintf("k%04d", k)))
		}
	}
	if _, err := db.Exec(context.Background(), `
		INSERT INTO inbox (source, event_id, event_type, key)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])`, srcs, evIDs, types, keyVals); err != nil {
		t.Fatal(err)
	}
}

// Rescue returns expired rows as they left them: a started row keeps its
// attempt and goes dead past its route's own max attempts; a row that never
// started gets its attempt back. DelayRescued then delays rows by id.
func TestRescueAndDelay(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	if _, err := db.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, payload, status, attempts, started, lease_token, lease_expires_at, locked_by)
		VALUES ('s', 'a', 'own', '{}', 'processing', 2, true, 7, now() - interval '1 second', 'w1'),
		       ('s', 'b', 'other', '{}', 'processing', 2, true, 7, now() - interval '1 second', 'w1'),
		       ('s', 'c', 'other', '{}', 'processing', 1, false, 7, now() - interval '1 second', 'w1'),
		       ('s', 'd', 'other', '{}', 'processing', 1, true, 8, now() + interval '1 hour', 'w2')`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	got, err := Rescue(ctx, tx, RescueParams{Limit: 10, MaxAttempts: 3, MaxAttemptsByType: map[string]int{"own": 2}, ExpiredPrefix: "expired "})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b Rescued) int { return strings.Compare(a.EventID, b.EventID) })
	want := []struct {
		eventID  string
		status   status.Status
		attempts int
		started  bool
	}{{"a", status.Dead, 2, true}, {"b", status.Received, 2, true}, {"c", status.Received, 0, false}}
	if len(got) != len(want) {
		t.Fatalf("rescued %+v, want %d rows (not the live lease)", got, len(want))
	}
	for i, w := range want {
		if g := got[i]; g.EventID != w.eventID || g.Status != w.status || g.Attempts != w.attempts || g.Started != w.started || g.ID == 0 {
			t.Errorf("rescued %+v, want %+v", g, w)
		}
	}
	if err := DelayRescued(ctx, tx, []RescueDelay{{ID: got[1].ID, Delay: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if err := DelayRescued(ctx, tx, nil); err != nil {
		t.Fatal(err)
	}
	var lastError string
	var delayed bool
	if err := tx.QueryRow(ctx, `SELECT last_error, available_at > now() + interval '59 minutes' FROM inbox WHERE event_id = 'b'`).
		Scan(&lastError, &delayed); err != nil {
		t.Fatal(err)
	}
	if lastError != "expired 2 (worker w1 lost the row)" || !delayed {
		t.Errorf("row b: last_error %q, delayed %v; want the prefix's message and an hour's delay", lastError, delayed)
	}
}

// DeleteOrphanStarts deletes the bits of claims no processing row carries,
// once they are older than asked.
func TestDeleteOrphanStarts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO inbox_starts (token, bits, version, updated_at)
		VALUES (1, '\x01', 1, now() - interval '1 hour'), (2, '\x01', 1, now()),
		       (3, '\x01', 1, now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload, status, lease_token, lease_expires_at)
		VALUES ('s', 'a', 't', '{}', 'processing', 3, now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	n, err := DeleteOrphanStarts(ctx, db, time.Minute)
	if err != nil || n != 1 {
		t.Fatalf("DeleteOrphanStarts = %d, %v; want 1 (token 1: 2 is too recent, 3 is held)", n, err)
	}
}

// Unpark releases the parked rows that wait for nothing, and reads the
// index on the key's hash to find out; UnparkDeleted unparks the row behind
// a deleted one.
func TestUnpark(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	insertKeyed(t, db, "ord", 50, 4)
	if _, err := db.Exec(ctx, `ANALYZE inbox`); err != nil {
		t.Fatal(err)
	}
	// The third row of each key is parked behind unfinished rows; so is the
	// second of key 0, whose first row is then deleted.
	if _, err := db.Exec(ctx, `UPDATE inbox SET available_at = '9999-12-31 00:00:00+00'
		WHERE event_id LIKE '%:002' OR event_id = 'k0000:001'`); err != nil {
		t.Fatal(err)
	}
	params := UnparkParams{Limit: 100, OrderedTypes: []string{"ord"}, BlockingTypes: []string{"ord"}}

	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{"SET LOCAL enable_bitmapscan = off", "SET LOCAL enable_seqscan = off"} {
		if _, err := tx.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	plan, err := tx.Query(ctx, "EXPLAIN "+unparkSQL, pgx.NamedArgs{
		"ordered_types": params.OrderedTypes, "blocking_types": params.BlockingTypes, "limit": params.Limit})
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(plan, pgx.RowTo[string])
	_ = tx.Rollback(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// (On a partitioned inbox the planner reads each partition by its own
	// index, named after the partition.)
	if p := strings.Join(lines, "\n"); !pgtest.Partitioned() && !strings.Contains(p, "inbox_key_hash_idx") {
		t.Errorf("the sweeper's plan does not read inbox_key_hash_idx:\n%s", p)
	}

	if n, err := Unpark(ctx, db, params); err != nil || n != 0 {
		t.Fatalf("Unpark = %d, %v; want 0 (every parked row waits for its key)", n, err)
	}
	if n, err := Unpark(ctx, db, UnparkParams{Limit: 10}); err != nil || n != 10 {
		t.Fatalf("Unpark without ordered routes = %d, %v; want the limit, 10", n, err)
	}

	tx, err = db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var deleted DeletedRow
	if err := tx.QueryRow(ctx, `DELETE FROM inbox WHERE event_id = 'k0000:000' RETURNING id, source, key, event_type`).
		Scan(&deleted.ID, &deleted.Source, &deleted.Key, &deleted.EventType); err != nil {
		t.Fatal(err)
	}
	if err := UnparkDeleted(ctx, tx, []DeletedRow{deleted, {ID: 1, Source: "s", EventType: "ord"}}); err != nil {
		t.Fatal(err)
	}
	var parked bool
	if err := tx.QueryRow(ctx, `SELECT available_at = '9999-12-31 00:00:00+00' FROM inbox WHERE event_id = 'k0000:001'`).Scan(&parked); err != nil {
		t.Fatal(err)
	}
	if parked {
		t.Error("the row behind a deleted row is still parked")
	}
}

// ReadStats and BlockedKeys count the live rows and the keys held by dead
// rows of blocking routes.
func TestStatsAndBlockedKeys(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	if _, err := db.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, payload, key, status, received_at)
		VALUES ('s', 'a', 'ord', '{}', 'k1', 'dead', now()),
		       ('s', 'b', 'ord', '{}', 'k1', 'dead', now()),
		       ('s', 'c', 'ord', '{}', 'k2', 'dead', now()),
		       ('s', 'd', 'other', '{}', 'k3', 'dead', now()),
		       ('s', 'e', 'x', '{}', NULL, 'rejected', now()),
		       ('s', 'f', 'x', '{}', NULL, 'received', now() - interval '2 hours'),
		       ('s', 'g', 'x', '{}', NULL, 'received', now())`); err != nil {
		t.Fatal(err)
	}
	s, err := ReadStats(ctx, db, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if s.Received != 2 || s.Processing != 0 || s.Dead != 4 || s.Rejected != 1 || s.Stale != 1 ||
		s.OldestReceivedAge < 2*time.Hour-time.Minute || s.OldestReadyAge <= 0 {
		t.Errorf("stats %+v", s)
	}
	if n, err := BlockedKeys(ctx, db, []string{"ord"}); err != nil || n != 2 {
		t.Errorf("BlockedKeys = %d, %v; want 2 (k1 once, k2)", n, err)
	}
	if n, err := BlockedKeys(ctx, db, nil); err != nil || n != 0 {
		t.Errorf("BlockedKeys(nil) = %d, %v; want 0", n, err)
	}
}

// The retention statements delete and count the expired rows, keeping the
// dead rows that hold their key back.
func TestRetentionStatements(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	if _, err := db.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, payload, key, status, processed_at, updated_at)
		VALUES ('s', 'p1', 'x', '{}', NULL, 'processed', now() - interval '2 hours', now()),
		       ('s', 'p2', 'x', '{}', NULL, 'processed', now() - interval '2 hours', now()),
		       ('s', 'p3', 'x', '{}', NULL, 'processed', now(), now()),
		       ('s', 'd1', 'ord', '{}', 'k', 'dead', NULL, now() - interval '2 hours'),
		       ('s', 'd2', 'x', '{}', 'k', 'dead', NULL, now() - interval '2 hours'),
		       ('s', 'r1', 'x', '{}', NULL, 'rejected', NULL, now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}
	blocking := []string{"ord"}
	if e, err := CountExpired(ctx, db, ExpiredParams{Processed: time.Hour, Failed: time.Hour, BlockingTypes: blocking}); err != nil || e != (Expired{Processed: 2, Failed: 2}) {
		t.Errorf("CountExpired = %+v, %v; want 2 processed, 2 failed", e, err)
	}
	if e, err := CountExpired(ctx, db, ExpiredParams{Processed: time.Hour}); err != nil || e != (Expired{Processed: 2}) {
		t.Errorf("CountExpired without failed retention = %+v, %v; want 2 processed, none failed", e, err)
	}
	if n, err := DeleteProcessed(ctx, db, time.Hour, 1); err != nil || n != 1 {
		t.Errorf("DeleteProcessed(batch 1) = %d, %v; want 1", n, err)
	}
	if n, err := DeleteProcessed(ctx, db, time.Hour, 10); err != nil || n != 1 {
		t.Errorf("DeleteProcessed = %d, %v; want the other 1", n, err)
	}
	if n, err := DeleteFailed(ctx, db, time.Hour, 10, blocking); err != nil || n != 2 {
		t.Errorf("DeleteFailed = %d, %v; want 2 (d1 holds its key)", n, err)
	}
	var left []string
	rows, err := db.Query(ctx, `SELECT event_id FROM inbox ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{"d1", "p3"}) {
		t.Errorf("rows left %v, want [d1 p3]", left)
	}
}
