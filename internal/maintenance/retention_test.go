package maintenance

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/worker"
)

// seedRetention fills the inbox with rows of every kind retention must tell
// apart: expired processed rows (more than one batch), recent processed,
// received, processing, and old and recent dead and rejected rows.
func (b *bundle) seedRetention(t *testing.T, oldProcessed int) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, processed_at, updated_at)
		SELECT 'test', 'old-' || g, 'x', 'processed', now() - interval '2 hours', now() - interval '2 hours'
		FROM generate_series(1, $1) g`, oldProcessed); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(ctx, `
		INSERT INTO inbox (source, event_id, event_type, status, processed_at)
		SELECT 'test', 'recent-' || g, 'x', 'processed', now() - interval '10 minutes' FROM generate_series(1, 10) g;
		INSERT INTO inbox (source, event_id, event_type, received_at)
		SELECT 'test', 'received-' || g, 'x', now() - interval '3 hours' FROM generate_series(1, 5) g;
		INSERT INTO inbox (source, event_id, event_type, status, lease_token, lease_expires_at, received_at)
		SELECT 'test', 'processing-' || g, 'x', 'processing', 1, now() + interval '1 hour', now() - interval '3 hours'
		FROM generate_series(1, 3) g;
		INSERT INTO inbox (source, event_id, event_type, status, updated_at)
		SELECT 'test', s || '-old-' || g, 'x', s, now() - interval '2 hours'
		FROM generate_series(1, 4) g, unnest(ARRAY['dead', 'rejected']) s;
		INSERT INTO inbox (source, event_id, event_type, status)
		SELECT 'test', s || '-recent-' || g, 'x', s FROM generate_series(1, 2) g, unnest(ARRAY['dead', 'rejected']) s;`); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) countLike(t *testing.T, pattern string) int {
	t.Helper()
	return b.count(t, `event_id LIKE $1`, pattern)
}

// Retention deletes exactly the expired processed rows (and, when asked, the
// expired dead and rejected ones), in batches, with two replicas pruning at
// once: nothing is deleted twice or missed, and nothing else is touched.
func TestRetentionDeletesExactlyTheExpiredRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const oldProcessed = 2500
	b.seedRetention(t, oldProcessed)

	newRetention := func(failed time.Duration) *Retention {
		r, err := NewRetention(b.db.Pool, worker.RetentionConfig{Processed: time.Hour, Failed: failed, Batch: 300, Pause: time.Millisecond},
			testLogger(t), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A dry run counts without deleting.
	dry, err := newRetention(time.Hour).Prune(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if dry.Processed != oldProcessed || dry.Failed != 8 {
		t.Fatalf("dry run = %+v, want %d processed and 8 dead/rejected", dry, oldProcessed)
	}
	if n := b.countLike(t, "old-%"); n != oldProcessed {
		t.Fatalf("the dry run deleted rows: %d old processed left", n)
	}

	// Two replicas, dead rows kept (INBOXD_DEAD_RETENTION=0).
	replicas := []*Retention{newRetention(0), newRetention(0)}
	var wg sync.WaitGroup
	results := make([]PruneResult, len(replicas))
	for i, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.Prune(ctx, false)
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		}()
	}
	wg.Wait()
	if got := results[0].Processed + results[1].Processed; got != oldProcessed {
		t.Fatalf("the replicas deleted %d + %d processed rows, want %d in all", results[0].Processed, results[1].Processed, oldProcessed)
	}
	for i, r := range replicas {
		if got := testutil.ToFloat64(r.metrics.deleted.WithLabelValues("processed")); got != float64(results[i].Processed) {
			t.Errorf("replica %d: deleted metric %v, result %d", i, got, results[i].Processed)
		}
	}
	for pattern, want := range map[string]int{
		"old-%": 0, "recent-%": 10, "received-%": 5, "processing-%": 3,
		"dead-old-%": 4, "rejected-old-%": 4, "dead-recent-%": 2, "rejected-recent-%": 2,
	} {
		if got := b.countLike(t, pattern); got != want {
			t.Errorf("%s: %d rows left, want %d", pattern, got, want)
		}
	}

	// With INBOXD_DEAD_RETENTION set, the old dead and rejected rows go too.
	res, err := newRetention(time.Hour).Prune(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Processed != 0 || res.Failed != 8 {
		t.Fatalf("second pass = %+v, want 0 processed and 8 dead/rejected", res)
	}
	for pattern, want := range map[string]int{"dead-old-%": 0, "rejected-old-%": 0, "dead-recent-%": 2, "rejected-recent-%": 2, "recent-%": 10} {
		if got := b.countLike(t, pattern); got != want {
			t.Errorf("%s: %d rows left, want %d", pattern, got, want)
		}
	}
}
