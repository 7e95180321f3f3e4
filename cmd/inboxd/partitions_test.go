package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// convertRows is the processed rows of the inbox TestPartitionsConvertOnline
// converts (fewer with -short).
func convertRows() int {
	if testing.Short() {
		return 200_000
	}
	return 5_000_000
}

// TestPartitionsConvertOnline converts a live inbox of 5 M rows with the
// daemon running and a third party inserting a row every 5 ms, then
// reverts it the same way: neither pauses ingest (the longest insert) or
// the workers (the longest received→processed, the longest gap between
// two rows processed) for a second or more, no row is lost, and the
// dedup key holds on every side.
func TestPartitionsConvertOnline(t *testing.T) {
	db := pgtest.NewPlain(t)
	ctx := context.Background()
	n := convertRows()
	start := time.Now()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload, status, attempts, received_at, processed_at)
		SELECT 'fill', 'f' || g, 'conv.event', '\x7b7d', 'processed', 1, now() - interval '2 hours', now() - interval '2 hours'
		FROM generate_series(1, $1::int) AS g`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error)
		SELECT 'fill', 'd' || g, 'conv.event', 'dead', 3, 'boom' FROM generate_series(1, 100) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE inbox`); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows written in %s", n+100, time.Since(start).Round(time.Second))

	routes := writeRoutes(t, "routes:\n  - type: conv.event\n    handler: ignore\n")
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_ROUTES=" + routes, "INBOXD_LOG_LEVEL=info"}
	d := testkit.StartDaemon(t, testkit.DaemonSpec{Binary: binary, Env: env})

	for _, step := range []struct {
		cmd  []string
		kind string
	}{
		{[]string{"partitions", "convert", "--span", "1h"}, "p"},
		{[]string{"partitions", "revert"}, "r"},
	} {
		name := step.cmd[1]
		p := startProducer(t, db, name)
		waitFor(t, 30*time.Second, "the daemon processing the producer's rows", func() bool {
			var k int
			_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE source = $1 AND status = 'processed'`, name).Scan(&k)
			return k >= 50
		})
		took := time.Now()
		cmd := exec.Command(binary, step.cmd...)
		cmd.Env = append(testkit.CleanEnv(), "INBOXD_DATABASE_URL="+db.URL)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("inboxd %s: %v\n%s", strings.Join(step.cmd, " "), err, out)
		}
		t.Logf("inboxd %s took %s", strings.Join(step.cmd, " "), time.Since(took).Round(time.Millisecond))
		// Some more rows after it, then the producer stops.
		sent := p.count()
		waitFor(t, 30*time.Second, "more rows produced after the command", func() bool { return p.count() >= sent+200 })
		longestInsert, inserted := p.stop(t)

		waitFor(t, 60*time.Second, "every produced row processed", func() bool {
			var k int
			_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE source = $1 AND status = 'processed'`, name).Scan(&k)
			return k == inserted
		})
		var kind string
		if err := db.Pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'inbox'::regclass`).Scan(&kind); err != nil {
			t.Fatal(err)
		}
		if kind != step.kind {
			t.Fatalf("after %s the inbox is of kind %q, want %q", name, kind, step.kind)
		}
		var latency, gap float64
		if err := db.Pool.QueryRow(ctx, `SELECT max(extract(epoch FROM processed_at - received_at)),
				max(extract(epoch FROM processed_at - prev))
			FROM (SELECT processed_at, received_at, lag(processed_at) OVER (ORDER BY processed_at) AS prev
			      FROM inbox WHERE source = $1) x`, name).Scan(&latency, &gap); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d rows inserted meanwhile; longest insert %s, longest received→processed %.3fs, longest gap between two processed rows %.3fs",
			name, inserted, longestInsert.Round(time.Millisecond), latency, gap)
		if longestInsert >= time.Second {
			t.Errorf("%s: an insert took %s (ingest paused)", name, longestInsert)
		}
		if latency >= 1 || gap >= 1 {
			t.Errorf("%s: the workers paused: received→processed up to %.3fs, %.3fs between two processed rows", name, latency, gap)
		}
		var total, dead int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'dead') FROM inbox WHERE source = 'fill'`).Scan(&total, &dead); err != nil {
			t.Fatal(err)
		}
		if total != n+100 || dead != 100 {
			t.Fatalf("after %s: %d rows of the fill (%d dead), want %d (100)", name, total, dead, n+100)
		}
		tag, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('fill', 'f1', 'conv.event', '') ON CONFLICT DO NOTHING`)
		if err != nil || tag.RowsAffected() != 0 {
			t.Fatalf("after %s, a duplicate of a converted row: %v, %d rows inserted; want 0", name, err, tag.RowsAffected())
		}
	}
	if code := terminate(t, d, 30*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0\n%s", code, d.Logs())
	}
	if logs := d.Logs(); strings.Contains(logs, `"level":"error"`) {
		t.Errorf("the daemon logged errors:\n%s", logs)
	}
}

// producer is a third party inserting one row every 5 ms, each in a
// statement of its own, timing each.
type producer struct {
	mu      sync.Mutex
	n       int
	longest time.Duration
	err     error
	stopCh  chan struct{}
	done    chan struct{}
}

func startProducer(t *testing.T, db *pgtest.DB, source string) *producer {
	p := &producer{stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-p.stopCh:
				return
			case <-tick.C:
			}
			at := time.Now()
			_, err := db.Pool.Exec(context.Background(), `INSERT INTO inbox (source, event_id, event_type, payload)
				VALUES ($1, $2, 'conv.event', '{}') ON CONFLICT DO NOTHING`, source, source+"-"+strconv.Itoa(i))
			took := time.Since(at)
			p.mu.Lock()
			if err != nil {
				p.err = err
				p.mu.Unlock()
				return
			}
			p.n++
			p.longest = max(p.longest, took)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.stopCh:
		default:
			close(p.stopCh)
		}
		<-p.done
	})
	return p
}

func (p *producer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *producer) stop(t *testing.T) (time.Duration, int) {
	t.Helper()
	close(p.stopCh)
	<-p.done
	if p.err != nil {
		t.Fatalf("producer: %v", p.err)
	}
	return p.longest, p.n
}
