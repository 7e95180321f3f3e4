package driver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// errorRows are the dead rows of the error searches' tests, oldest first:
// the texts to tell apart, then 30 of one common text (the newest, read
// first: a window of 10 never reaches the oldest).
var errorRows = append([]string{
	"HTTP 503 Service_Unavailable",
	"http 5030 upstream",
	"Service-Unavailable",
	"100% failed",
	"1000 failed",
	`open C:\tmp\x: denied`,
	"open C:tmp",
}, slices.Repeat([]string{"attempt 25 of 25: http 500"}, 30)...)

// seedErrorRows inserts errorRows as dead rows (and a processed row
// without an error) and returns their ids, oldest first.
func seedErrorRows(t *testing.T, db *pgxpool.Pool) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	for i, e := range errorRows {
		var id int64
		if err := db.QueryRow(ctx, `INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error)
			VALUES ('src', $1, 't', 'dead', 3, $2) RETURNING id`, fmt.Sprintf("e%d", i), e).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, status, processed_at)
		VALUES ('src', 'ok', 't', 'processed', now()); ANALYZE inbox`); err != nil {
		t.Fatal(err)
	}
	return ids
}

// searchAll lists every page (of 4) of the dead rows whose error holds
// text, reading a window of 10 rows first, and returns their ids.
func searchAll(t *testing.T, db *pgxpool.Pool, text string) []int64 {
	t.Helper()
	var got []int64
	q := ListQuery{View: ViewDead, Filter: FailedFilter{Error: text}, Limit: 4, window: 10}
	for range 20 {
		page, err := ListRows(context.Background(), db, q)
		if err != nil {
			t.Fatalf("search %q: %v", text, err)
		}
		for _, r := range page {
			got = append(got, r.ID)
		}
		if len(page) < q.Limit {
			return got
		}
		q.AfterID = page[len(page)-1].ID
	}
	t.Fatalf("search %q: more than 20 pages", text)
	return nil
}

// checkErrorSearch checks that a search by error text finds the rows
// whose error holds the text, in any case, its %, _ and \ as they are, on
// every page, newest first.
func checkErrorSearch(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	ids := seedErrorRows(t, db)
	common := slices.Clone(ids[7:])
	slices.Reverse(common)
	for _, c := range []struct {
		text string
		want []int64
	}{
		{"http 503", []int64{ids[1], ids[0]}},
		{"SERVICE_unav", []int64{ids[0]}}, // _ is no wildcard
		{"100%", []int64{ids[3]}},         // nor %
		{`c:\tmp`, []int64{ids[5]}},       // \ is no escape
		{"no such error", nil},
		{"of 25: HTTP 500", common}, // a page from the window, the rest through the index (or the rows)
		{"e-u", []int64{ids[2]}},
	} {
		if got := searchAll(t, db, c.text); !slices.Equal(got, c.want) {
			t.Errorf("search %q: rows %v, want %v", c.text, got, c.want)
		}
	}
}

// The search by error text finds what strpos on the lowered text finds,
// through the window of the first rows and then the pg_trgm index of
// migration 21, and the index serves it.
func TestListByErrorTextMatchesSubstrings(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	ready, err := ErrorIndexReady(ctx, db)
	if err != nil || !ready {
		t.Fatalf("error text's index ready = %v, %v; want the index of migration 21", ready, err)
	}
	checkErrorSearch(t, db)

	// The second try reads the index, not the dead rows.
	if pgtest.Partitioned() {
		return // the plan names the partitions' indexes
	}
	if _, err := db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error)
		SELECT 'src', 'more-' || g, 't', 'dead', 25, 'attempt 25 of 25: http ' || (500 + g % 4) FROM generate_series(1, 20000) AS g;
		ANALYZE inbox`); err != nil {
		t.Fatal(err)
	}
	args, err := ListQuery{View: ViewDead, Filter: FailedFilter{Error: "no such error"}, Limit: 50}.args()
	if err != nil {
		t.Fatal(err)
	}
	plan := planWithoutSeqScans(t, db, listSQL[ViewDead][listVariant{search: searchIndex}], args)
	if !strings.Contains(plan, "inbox_error_trgm_idx") {
		t.Errorf("the search's second try does not read inbox_error_trgm_idx:\n%s", plan)
	}
}

// Without pg_trgm (an administrator never created it, or dropped it), the
// search by error text finds the same rows, reading them.
func TestListByErrorWithoutTheIndex(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	if _, err := db.Exec(ctx, "DROP EXTENSION pg_trgm CASCADE"); err != nil { // its index with it
		t.Fatal(err)
	}
	ready, err := ErrorIndexReady(ctx, db)
	if err != nil || ready {
		t.Fatalf("error text's index ready = %v, %v after DROP EXTENSION pg_trgm", ready, err)
	}
	checkErrorSearch(t, db)
	// A build stopped half-way leaves an invalid index: not used either.
	if _, err := db.Exec(ctx, `CREATE EXTENSION pg_trgm`); err != nil {
		t.Fatal(err)
	}
	if !pgtest.Partitioned() {
		if _, err := db.Exec(ctx, `CREATE INDEX inbox_error_trgm_idx ON inbox USING gin (lower(last_error) gin_trgm_ops) WHERE last_error IS NOT NULL;
			UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'inbox_error_trgm_idx'::regclass`); err != nil {
			t.Fatal(err)
		}
		if ready, err := ErrorIndexReady(ctx, db); err != nil || ready {
			t.Fatalf("an invalid index: ready = %v, %v", ready, err)
		}
	}
}

// A key's rows are listed from every source when no source is given, in
// each view, through the key's index (a skip scan over its sources); with
// a source, from that source alone.
func TestListByKeyWithoutSource(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	// Every source has rows of key k and of other keys in every view.
	if _, err := db.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, key, status, attempts, available_at, lease_token, lease_expires_at,
		                   last_error, processed_at)
		SELECT s, v || '-' || k || '-' || g, 't', convert_to(k, 'UTF8'),
		       CASE v WHEN 'processing' THEN 'processing' WHEN 'dead' THEN 'dead' WHEN 'processed' THEN 'processed' ELSE 'received' END,
		       CASE v WHEN 'waiting' THEN 0 ELSE 2 END,
		       CASE v WHEN 'retrying' THEN now() + interval '1 hour' ELSE now() END,
		       CASE v WHEN 'processing' THEN 7 END,
		       CASE v WHEN 'processing' THEN now() + interval '1 minute' END,
		       CASE v WHEN 'retrying' THEN 'http 503' WHEN 'dead' THEN 'http 500' END,
		       CASE v WHEN 'processed' THEN now() END
		FROM unnest(ARRAY['a', 'b', 'c']) AS s,
		     unnest(ARRAY['waiting', 'retrying', 'processing', 'dead', 'processed']) AS v,
		     unnest(ARRAY['k', 'other', 'k2']) AS k,
		     generate_series(1, 2) AS g;
		ANALYZE inbox`); err != nil {
		t.Fatal(err)
	}
	for _, v := range []ListView{ViewWaiting, ViewRetrying, ViewProcessing, ViewDead, ViewProcessed} {
		for _, src := range []string{"", "b"} {
			rows, err := ListRows(ctx, db, ListQuery{View: v, Filter: FailedFilter{Key: []byte("k"), Source: src}, Limit: 50})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rows {
				got = append(got, r.Source+"/"+r.EventID)
			}
			slices.Sort(got)
			var want []string
			for _, s := range []string{"a", "b", "c"} {
				if src == "" || s == src {
					want = append(want, s+"/"+string(v)+"-k-1", s+"/"+string(v)+"-k-2")
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s by key k, source %q: %v, want %v", v, src, got, want)
			}
		}
	}
	if pgtest.Partitioned() {
		return // the plan names the partitions' indexes
	}
	args, err := ListQuery{View: ViewDead, Filter: FailedFilter{Key: []byte("k")}, Limit: 50}.args()
	if err != nil {
		t.Fatal(err)
	}
	plan := planWithoutSeqScans(t, db, listSQL[ViewDead][listVariant{byKey: true}], args)
	if !strings.Contains(plan, "Index Scan using inbox_key_hash_idx on inbox i") || strings.Contains(plan, "inbox_failed_idx") {
		t.Errorf("dead rows by key do not read the key's index:\n%s", plan)
	}
}

// Dead and rejected rows are counted exactly up to ExactCountLimit, then
// estimated from the statistics, never below the limit.
func TestReadStatsEstimatesLargeCounts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Pool
	ctx := context.Background()
	insert := func(n int, st string) {
		t.Helper()
		if _, err := db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, status, last_error)
			SELECT 'src', $2 || '-' || g || '-' || random(), 't', $2, 'boom' FROM generate_series(1, $1) AS g`, n, st); err != nil {
			t.Fatal(err)
		}
	}
	insert(ExactCountLimit, "dead")
	insert(3, "rejected")
	s, err := ReadStats(ctx, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Dead != ExactCountLimit || s.DeadEstimated || s.Rejected != 3 || s.RejectedEstimated {
		t.Fatalf("at the limit: %+v, want %d dead and 3 rejected, exact", s, ExactCountLimit)
	}
	// One more: estimated, and never below the limit though the
	// statistics (none yet) know of no dead row.
	insert(1, "dead")
	if s, err = ReadStats(ctx, db, 0); err != nil {
		t.Fatal(err)
	}
	if !s.DeadEstimated || s.Dead < ExactCountLimit+1 || s.RejectedEstimated || s.Rejected != 3 {
		t.Fatalf("past the limit, before ANALYZE: %+v", s)
	}
	// With statistics: about the real count.
	insert(20_000, "dead")
	if _, err := db.Exec(ctx, "ANALYZE inbox"); err != nil {
		t.Fatal(err)
	}
	if s, err = ReadStats(ctx, db, 0); err != nil {
		t.Fatal(err)
	}
	if real := int64(ExactCountLimit + 20_001); !s.DeadEstimated || s.Dead < real*8/10 || s.Dead > real*12/10 {
		t.Fatalf("past the limit, analyzed: %+v, want about %d dead", s, real)
	}
}
