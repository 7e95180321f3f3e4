package faultsuite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrate runs `<binary> migrate` against dbURL.
func Migrate(t testing.TB, binary, dbURL string) {
	t.Helper()
	cmd := exec.Command(binary, "migrate")
	cmd.Env = append(cleanEnv(), "INBOXD_DATABASE_URL="+dbURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("inboxd migrate: %v\n%s", err, out)
	}
}

// OpenPool opens an inspection pool on dbURL, closed when t ends.
func OpenPool(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Event is one row to insert with SQL, as any service may.
type Event struct {
	// ID is the event id.
	ID string
	// Type is the event type.
	Type string
	// Payload is the row's payload.
	Payload []byte
}

// InsertEvents inserts events into the inbox in one statement, skipping
// existing (source, event_id) pairs, as README's example does.
func InsertEvents(ctx context.Context, db *pgxpool.Pool, source string, events []Event) error {
	ids := make([]string, len(events))
	types := make([]string, len(events))
	payloads := make([][]byte, len(events))
	for i, e := range events {
		ids[i], types[i], payloads[i] = e.ID, e.Type, e.Payload
		if payloads[i] == nil {
			payloads[i] = []byte("{}")
		}
	}
	_, err := db.Exec(ctx, `
INSERT INTO inbox (source, event_id, event_type, payload)
SELECT $1, e.id, e.typ, e.payload FROM unnest($2::text[], $3::text[], $4::bytea[]) AS e(id, typ, payload)
ON CONFLICT DO NOTHING`, source, ids, types, payloads)
	return err
}

// InsertStream inserts s with SQL in the background, paced at s.Rate,
// under source, and records each committed batch as acknowledged. The
// insert connection does not go through any proxy: it stands for the
// services writing to the inbox.
func InsertStream(ctx context.Context, db *pgxpool.Pool, source string, s Stream) *Production {
	p := &Production{ackedAt: map[string]time.Time{}, done: make(chan struct{}), types: map[string]string{}}
	go func() {
		defer close(p.done)
		batch := s.batch()
		pace := newPacer(s.Rate, batch)
		for start := 0; start < s.N; start += batch {
			if !pace.wait(ctx) {
				return
			}
			end := min(start+batch, s.N)
			evs := make([]Event, 0, end-start)
			for i := start; i < end; i++ {
				evs = append(evs, Event{ID: s.ID(i), Type: s.typ(i), Payload: s.payload(i)})
			}
			var err error
			for try := 0; try < 50; try++ { // the shared server is not the one being faulted; retry blips
				ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err = InsertEvents(ictx, db, source, evs)
				cancel()
				if err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			now := time.Now()
			p.mu.Lock()
			if err != nil {
				p.failed += len(evs)
				if p.err == nil {
					p.err = fmt.Errorf("insert batch at %d: %w", start, err)
				}
			} else {
				for _, e := range evs {
					p.acked = append(p.acked, e.ID)
					p.ackedAt[e.ID] = now
					p.types[e.ID] = e.Type
				}
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// StatusCounts returns the number of inbox rows per status.
func StatusCounts(ctx context.Context, db *pgxpool.Pool) (map[string]int, error) {
	rows, err := db.Query(ctx, `SELECT status, count(*) FROM inbox GROUP BY status`)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			rows.Close()
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// formatCounts renders status counts in a fixed order.
func formatCounts(c map[string]int) string {
	var parts []string
	for _, s := range []string{"received", "processing", "processed", "dead", "rejected"} {
		parts = append(parts, fmt.Sprintf("%s=%d", s, c[s]))
	}
	return strings.Join(parts, " ")
}

// CountSettled counts the rows of source among ids that are processed, and
// those in a final state (processed, dead or rejected: the engine never
// moves them again).
func CountSettled(ctx context.Context, db *pgxpool.Pool, source string, ids []string) (processed, final int, err error) {
	err = db.QueryRow(ctx,
		`SELECT count(*) FILTER (WHERE status = 'processed'),
		        count(*) FILTER (WHERE status IN ('processed', 'dead', 'rejected'))
		 FROM inbox WHERE source = $1 AND event_id = ANY($2)`,
		source, ids).Scan(&processed, &final)
	return processed, final, err
}

// Runs is the history of handler invocations the embedder appends to its
// FAULT_RUNS_FILE: for each event id, the attempts and process ids, in
// order.
type Runs struct {
	// ByEvent maps an event id to its invocations.
	ByEvent map[string][]Invocation
}

// Invocation is one handler call recorded by the embedder.
type Invocation struct {
	// Type is the event type.
	Type string
	// Attempt is the attempt number the engine passed.
	Attempt int
	// PID is the process that ran it.
	PID int
}

// ReadRuns parses a runs file written by the embedder.
func ReadRuns(path string) (Runs, error) {
	r := Runs{ByEvent: map[string][]Invocation{}}
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		var inv Invocation
		var id string
		if _, err := fmt.Sscanf(line, "%s %s %d %d", &inv.Type, &id, &inv.Attempt, &inv.PID); err != nil {
			return r, fmt.Errorf("runs file: bad line %q", line)
		}
		r.ByEvent[id] = append(r.ByEvent[id], inv)
	}
	return r, nil
}

// MaxRuns returns the largest number of invocations of one event and that
// event's id.
func (r Runs) MaxRuns() (n int, eventID string) {
	for id, invs := range r.ByEvent {
		if len(invs) > n {
			n, eventID = len(invs), id
		}
	}
	return n, eventID
}

// waitCond polls cond every interval until it returns true or timeout
// passes; it reports whether cond became true.
func waitCond(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// WaitFor polls cond until it holds, failing t (Fatal) with what after
// timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !waitCond(timeout, 50*time.Millisecond, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}
