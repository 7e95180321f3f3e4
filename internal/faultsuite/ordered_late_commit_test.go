package faultsuite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scenario: ordered keys, SQL producers committing out of order. For each
// of 40 keys of an ordered http route, one transaction inserts the key's
// first row (the lower id) and holds it open about 3 s while a later row of
// the key is inserted and committed; the later row is claimed and its
// request is still in flight (the sink answers after 5 s) when the first
// row commits. The sink counts the requests in flight per key: no key may
// have two at once (from outside, before the fix, 36 of 40 keys had), and
// nothing is lost. The order SQL producers get is that of the ids among
// the rows visible at claim time: the late row runs after the later one.
func TestOrderedKeysLateCommits(t *testing.T) {
	scenario(t, light)
	db := sharedDB(t)
	sink := NewSink(t)
	sink.TrackKeys(func(eventID string) string { key, _, _ := strings.Cut(eventID, "/"); return key })
	sink.SetDelay(5 * time.Second)
	lease := 10 * time.Second
	run := NewRun(t, db.Pool, sink, lease)
	ctx := context.Background()

	routes := writeRoutes(t, fmt.Sprintf("routes:\n  - type: ordered.effect\n    handler: http\n    url: %s\n    timeout: 30s\n    ordered: true\n    on_dead: block\n", sink.URL()))
	d := StartDaemon(t, DaemonSpec{Name: "a", Binary: bins.Inboxd, Env: baseEnv(db.URL, lease, 64, "INBOXD_ROUTES="+routes)})

	const keys = 40
	insert := `INSERT INTO inbox (source, event_id, event_type, key, payload) VALUES ('sql', $1, 'ordered.effect', $2, '{}')`
	var late []pgx.Tx
	var ids []string
	for k := range keys {
		key := fmt.Sprintf("k%02d", k)
		conn, err := pgx.Connect(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, insert, key+"/1-late", []byte(key)); err != nil {
			t.Fatal(err)
		}
		late = append(late, tx)
		if _, err := db.Pool.Exec(ctx, insert, key+"/2", []byte(key)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, key+"/1-late", key+"/2")
	}
	opened := time.Now()
	run.Expect("sql", ids...)
	// Every key's later row is in flight before the late rows commit.
	if !waitCond(scale(10*time.Second), 20*time.Millisecond, func() bool { return sink.Requests() >= keys }) {
		t.Fatalf("only %d of the %d later rows reached the sink", sink.Requests(), keys)
	}
	if wait := 3*time.Second - time.Since(opened); wait > 0 {
		time.Sleep(wait) // the producers' transactions stay open about 3 s: the fault itself
	}
	var wg sync.WaitGroup
	for _, tx := range late {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tx.Commit(ctx); err != nil {
				t.Errorf("commit the late row: %v", err)
			}
		}()
	}
	wg.Wait()
	run.Ledger.Record("late commit", Fault{})
	run.WaitProcessed(scale(60 * time.Second))
	CheckLeasesRecovered(t, db.Pool, time.Now(), lease)
	run.Check()

	overlaps := sink.Overlaps()
	run.Note("keys_overlapping=%d", len(overlaps))
	if len(overlaps) > 0 {
		t.Errorf("OVERLAP: %d of %d keys had two requests in flight at once: %v", len(overlaps), keys, overlaps)
	}
	laterFirst := 0
	for k := range keys {
		key := fmt.Sprintf("k%02d", k)
		if a := sink.Arrivals(key); len(a) > 0 && a[0] == key+"/2" {
			laterFirst++
		}
	}
	run.Note("later_row_first=%d", laterFirst)
	if t.Failed() {
		t.Logf("daemon log digest:\n%s", LogDigest(d.Logs(), 10))
	}
}
