package driver

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// The console's statements never read the processed rows but through
// their index: with the planner kept off sequential scans, every plan
// reads the inbox through the index it names, never a Seq Scan of the
// inbox, so the pages stay fast on a table of millions of processed rows.
func TestConsoleStatementsReadTheirIndexes(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPlain(t).Pool // plans name the unpartitioned indexes
	ctx := context.Background()
	if _, err := db.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, processed_at, key)
		SELECT 'src' || (g % 5), 'e' || g, 't', 'processed', now() - (g || ' seconds')::interval, convert_to('k' || (g % 50), 'UTF8')
		FROM generate_series(1, 20000) AS g;
		INSERT INTO inbox (source, event_id, event_type, status, key, last_error)
		SELECT 'src1', 'd' || g, 't', 'dead', convert_to('k' || g, 'UTF8'), 'boom' FROM generate_series(1, 20) AS g;
		ANALYZE inbox`); err != nil {
		t.Fatal(err)
	}
	page := FailedFilter{Status: "dead", EventType: "t", Source: "src1", Error: "boo"}.args(0, math.MaxInt64)
	page["limit"] = 50
	for _, c := range []struct {
		name string
		sql  string
		args pgx.NamedArgs
		want []string
	}{
		{"failed page", consoleFailedPageSQL, page, []string{"inbox_failed_idx"}},
		{"throughput", consoleThroughputSQL, nil, []string{"inbox_processed_at_idx", "inbox_failed_idx"}},
		{"event search", consoleEventSearchSQL, pgx.NamedArgs{"event_id": "e7"}, []string{"inbox_source_event_id_key"}},
		{"key held", consoleKeyHeldSQL, pgx.NamedArgs{"id": 20001, "limit": 50}, []string{"inbox_pkey", "inbox_key_hash_idx"}},
		{"blocked", consoleBlockedSQL, pgx.NamedArgs{"before": math.MaxInt64, "limit": 50, "blocking_types": []string{"t"}}, []string{"inbox_failed_idx", "inbox_key_hash_idx"}},
		{"failing heads", consoleFailingSQL, pgx.NamedArgs{"limit": 50, "ordered_types": []string{"t"}}, []string{"inbox_received_idx", "inbox_key_hash_idx"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := planWithoutSeqScans(t, db, c.sql, c.args)
			for _, w := range c.want {
				if !strings.Contains(plan, w) {
					t.Errorf("plan does not read %s:\n%s", w, plan)
				}
			}
			if strings.Contains(plan, "Seq Scan on inbox") {
				t.Errorf("plan scans the inbox:\n%s", plan)
			}
		})
	}
}

// FindEvent finds an event id in every source, and only there.
func TestFindEventAcrossSources(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type) VALUES
		('a', 'x', 't'), ('b', 'x', 't'), ('c', 'y', 't'), ('d', 'x', 't')`); err != nil {
		t.Fatal(err)
	}
	got, err := FindEvent(ctx, db, "x")
	if err != nil {
		t.Fatal(err)
	}
	var srcs []string
	for _, r := range got {
		srcs = append(srcs, r.Source)
	}
	if strings.Join(srcs, ",") != "a,b,d" {
		t.Errorf("found in %v, want a,b,d", srcs)
	}
}
