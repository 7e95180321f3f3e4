package partitions_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/partitions"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// TestMaintainCarriesAndRetires: maintenance switches generations, carries
// the rows a drop must not reach (a dead row, a row parked behind its key)
// into the current partition with their ids, waits for a row still due,
// and retires a partition once every row in it is finished and past the
// retention, dropping its processed rows with it.
func TestMaintainCarriesAndRetires(t *testing.T) {
	db := pgtest.NewPartitioned(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO inbox (source, event_id, event_type, status, attempts, processed_at)
		SELECT 's', 'p' || g, 't', 'processed', 1, now() - interval '1 hour' FROM generate_series(1, 100) g`)
	exec(`INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error) VALUES ('s', 'dead', 't', 'dead', 3, 'boom')`)
	exec(`INSERT INTO inbox (source, event_id, event_type, key, available_at) VALUES ('s', 'parked', 't', 'k', '9999-12-31')`)
	exec(`INSERT INTO inbox (source, event_id, event_type) VALUES ('s', 'due', 't')`)
	var deadID, parkedID int64
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT id FROM inbox WHERE event_id = 'dead'), (SELECT id FROM inbox WHERE event_id = 'parked')`).Scan(&deadID, &parkedID); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE inboxd_partitioned SET span = interval '1 second', switched_at = now() - interval '1 hour' WHERE tbl = 'inbox'`)

	round := func() partitions.Round {
		t.Helper()
		r, ok, err := partitions.Maintain(ctx, db.Pool, "inbox", time.Millisecond, zerolog.Nop())
		if err != nil || !ok {
			t.Fatalf("Maintain: %v (partitioned %v)", err, ok)
		}
		return r
	}
	// The first round makes partition 2; the next switches into it.
	round()
	if r := round(); r.Switched != 2 {
		t.Fatalf("second round switched to %d, want 2", r.Switched)
	}
	exists := func(name string) bool {
		var ok bool
		if err := db.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !exists("inbox_p1") {
		t.Fatal("inbox_p1 retired while a row in it was still due")
	}
	var gen int64
	for _, id := range []int64{deadID, parkedID} {
		if err := db.Pool.QueryRow(ctx, `SELECT gen FROM inbox WHERE id = $1`, id).Scan(&gen); err != nil || gen != 2 {
			t.Fatalf("row %d: generation %d, %v; want carried into 2", id, gen, err)
		}
	}
	exec(`UPDATE inbox SET status = 'processed', processed_at = now() - interval '1 hour' WHERE event_id = 'due'`)
	exec(`UPDATE inboxd_partitioned SET switched_at = now() WHERE tbl = 'inbox'`) // no switch now
	r := round()
	if exists("inbox_p1") {
		t.Fatalf("inbox_p1 not retired once every row in it may go (round %+v)", r)
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("%d rows left, %v; want the dead and the parked one", rows, err)
	}
}
