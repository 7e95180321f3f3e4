package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/driver/status"
)

// processingRows puts n rows in processing under token and returns their
// ids in ascending order. The table also holds 20,000 processed rows, as a
// production inbox does: with only a handful of rows the planner scans the
// table and locks rows in physical order, which hides lock-order bugs.
func (b *bundle) processingRows(t *testing.T, n int, token int64) []int64 {
	t.Helper()
	ctx := context.Background()
	b.insert(t, "x", ids("d", n)...)
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, processed_at)
		SELECT 'retained', 'r' || g, 'x', 'processed', now() FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	rows, err := b.db.Pool.Query(ctx, `
		UPDATE inbox SET status = 'processing', attempts = 1, lease_token = $1,
		       lease_expires_at = now() + interval '1 hour'
		WHERE source = 'test'
		RETURNING id`, token)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("put %d rows in processing, want %d", len(got), n)
	}
	if _, err := b.db.Pool.Exec(ctx, `ANALYZE inbox`); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		for j := i + 1; j < len(got); j++ {
			if got[j] < got[i] {
				got[i], got[j] = got[j], got[i]
			}
		}
	}
	return got
}

// statement runs f in the background and keeps its result.
type statement struct {
	done chan struct{}
	err  error
}

func goStatement(f func() error) *statement {
	s := &statement{done: make(chan struct{})}
	go func() { s.err = f(); close(s.done) }()
	return s
}

// finished reports whether the statement returned within d.
func (s *statement) finished(d time.Duration) bool {
	select {
	case <-s.done:
		return true
	case <-time.After(d):
		return false
	}
}

// waitLocked waits until the statement whose text contains what waits on a
// lock in another backend, or has finished (a statement that skips locked
// rows never waits).
func (b *bundle) waitLocked(t *testing.T, s *statement, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s.finished(0) {
			return
		}
		var waiting bool
		if err := b.db.Pool.QueryRow(context.Background(), `
			SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			               WHERE datname = current_database() AND wait_event_type = 'Lock'
			                 AND query LIKE $1)`, "%"+what+"%").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s neither finished nor waited on a lock", what)
}

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

// Reproduction from the bug report: a renewal over rows [1,2,3] and a
// completion over rows [3,1], while a third session holds row 2, deadlocked
// because both statements locked rows in the order of their arrays.
// Statements that lock many inbox rows must take them in one order (or not
// wait at all).
func TestRenewalAndCompletionDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const token = 42
	id := b.processingRows(t, 3, token)
	p := newTestPool(t, b)

	holder, err := b.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	if _, err := holder.Exec(ctx, `SELECT 1 FROM inbox WHERE id = $1 FOR UPDATE`, id[1]); err != nil {
		t.Fatal(err)
	}

	renew := goStatement(func() error {
		_, err := p.leaser.renewRows(ctx, []renewal{{id: id[0], token: token}, {id: id[1], token: token}, {id: id[2], token: token}})
		return err
	})
	b.waitLocked(t, renew, "lease_expires_at")
	complete := goStatement(func() error {
		_, err := p.completer.writeOutcomes(ctx, []result{
			{id: id[2], token: token, status: status.Processed},
			{id: id[0], token: token, status: status.Processed},
		})
		return err
	})
	b.waitLocked(t, complete, "attempts_delta")

	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*statement{"renewal": renew, "completion": complete} {
		if !s.finished(10 * time.Second) {
			t.Fatalf("%s did not finish", name)
		}
		if s.err != nil {
			t.Fatalf("%s failed: %v (deadlock: %v)", name, s.err, isDeadlock(s.err))
		}
	}
}

// Many renewals and completions over overlapping rows in random orders, from
// several connections at once, never deadlock.
func TestRenewalCompletionStress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const token = 7
	id := b.processingRows(t, 40, token)
	p := newTestPool(t, b)

	// Completions write received (a retry) so rows stay fenceable by the
	// renewals; re-arm the lease in between.
	rearm := func() {
		if _, err := b.db.Pool.Exec(ctx, `
			UPDATE inbox SET status = 'processing', lease_token = $1,
			       lease_expires_at = now() + interval '1 hour'
			WHERE source = 'test' AND status <> 'processing'`, token); err != nil && !isDeadlock(err) {
			t.Error(err)
		}
	}
	shuffled := func(r *rand.Rand) []int64 {
		out := append([]int64(nil), id...)
		r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out[:10+r.IntN(30)]
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 30 {
				ids := shuffled(r)
				var err error
				if g%2 == 0 {
					rs := make([]renewal, len(ids))
					for i, id := range ids {
						rs[i] = renewal{id: id, token: token}
					}
					_, err = p.leaser.renewRows(ctx, rs)
				} else {
					res := make([]result, len(ids))
					for i, id := range ids {
						res[i] = result{id: id, token: token, status: status.Received}
					}
					_, err = p.completer.writeOutcomes(ctx, res)
					rearm()
				}
				if err != nil {
					errs <- fmt.Errorf("goroutine %d: %w (deadlock: %v)", g, err, isDeadlock(err))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
