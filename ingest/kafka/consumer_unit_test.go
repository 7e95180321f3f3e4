package kafka

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
)

func msg(partition int, offset int64, id string) kafka.Message {
	return kafka.Message{
		Topic: "t", Partition: partition, Offset: offset, HighWaterMark: offset + 1,
		Value: []byte("v"), Headers: hdrs("event_id", id, "event_type", "t"),
	}
}

// A failed write is retried with the very same rows, nothing is committed
// until it succeeds, and Ready is false meanwhile.
func TestRetriesTheSameBatchAndCommitsOnlyAfterWrite(t *testing.T) {
	t.Parallel()
	w := &fakeWriter{}
	w.failing.Store(true)
	r := newFakeReader()
	c, run := unitConsumer(t, w, r, nil)
	stop := run()

	r.msgs <- msg(0, 5, "a")
	r.msgs <- msg(1, 9, "b")
	r.msgs <- msg(0, 6, "c")
	// A fourth message must not be fetched into the failing batch.
	r.msgs <- msg(1, 10, "d")

	waitFor(t, 5*time.Second, func() (bool, string) {
		attempts, _ := w.snapshot()
		return len(attempts) >= 5, fmt.Sprintf("%d write attempts", len(attempts))
	})
	if c.Ready() {
		t.Error("Ready() = true while writes fail")
	}
	if got := testutil.ToFloat64(c.Metrics.Ready); got != 0 {
		t.Errorf("ready gauge = %v while writes fail", got)
	}
	if got := r.committed(); len(got) != 0 {
		t.Errorf("offsets committed while the batch is not written: %v", got)
	}
	attempts, _ := w.snapshot()
	for i, a := range attempts {
		if !reflect.DeepEqual(a, []string{"a", "b", "c"}) {
			t.Errorf("attempt %d wrote %v, want the same batch [a b c]", i, a)
		}
	}

	w.failing.Store(false)
	// The fourth message waits in the next batch (written after the first)
	// or in the reader: partition 1 is committed at 10, or at 11 with it.
	waitFor(t, 5*time.Second, func() (bool, string) {
		got := r.committed()
		return got[0] == 7 && got[1] >= 10, fmt.Sprintf("committed %v", got)
	})
	if !c.Ready() {
		t.Error("Ready() = false after the write succeeded")
	}
	if got := testutil.ToFloat64(c.Metrics.BatchWriteErrors); got < 4 {
		t.Errorf("batch write errors = %v, want >= 4", got)
	}
	waitFor(t, 5*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(c.Metrics.MessagesFetched)
		return n == 4, fmt.Sprintf("%v messages fetched", n)
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The fourth message was in hand at shutdown: written and committed.
	if got := r.committed(); got[1] != 11 {
		t.Errorf("committed %v after shutdown, want partition 1 at 11", got)
	}
	if c.Ready() {
		t.Error("Ready() = true after Run returned")
	}
}

// A batch closes on time as well as on size.
func TestBatchClosesOnTimeout(t *testing.T) {
	t.Parallel()
	w := &fakeWriter{}
	r := newFakeReader()
	c, run := unitConsumer(t, w, r, func(cfg *Config) {
		cfg.BatchSize = 500
		cfg.BatchTimeout = 20 * time.Millisecond
	})
	run()
	r.msgs <- msg(0, 0, "a")
	r.msgs <- msg(0, 1, "b")
	waitFor(t, 5*time.Second, func() (bool, string) {
		got := r.committed()
		return got[0] == 2, fmt.Sprintf("committed %v", got)
	})
	if got := testutil.ToFloat64(c.Metrics.RowsInserted); got != 2 {
		t.Errorf("rows inserted = %v, want 2", got)
	}
}

// Healthy reports a fetch that waits on a known backlog for longer than
// StallTimeout, and forgets the backlog at a rebalance.
func TestHealthyDetectsStalledFetch(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	clock.advance(time.Hour)
	w := &fakeWriter{}
	r := newFakeReader()
	c, run := unitConsumer(t, w, r, func(cfg *Config) {
		cfg.BatchSize = 1
		cfg.StallTimeout = time.Minute
	})
	c.Now = clock.now
	if err := c.Healthy(); err != nil {
		t.Fatalf("Healthy before Run: %v", err)
	}
	run()

	fetchingAgain := func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.fetchingSince.IsZero() && !c.Progress().IsZero(), "consumer waiting in FetchMessage again"
	}

	// Caught up: the partition's high-water mark is just past the message.
	r.msgs <- msg(0, 0, "a")
	waitFor(t, 5*time.Second, func() (bool, string) {
		_, stored := w.snapshot()
		return stored == 1, "first message stored"
	})
	waitFor(t, 5*time.Second, fetchingAgain)
	clock.advance(time.Hour)
	if err := c.Healthy(); err != nil {
		t.Errorf("Healthy while idle and caught up: %v", err)
	}

	// Behind: ten more messages are known to wait, and nothing comes.
	m := msg(0, 1, "b")
	m.HighWaterMark = 12
	r.msgs <- m
	waitFor(t, 5*time.Second, func() (bool, string) {
		_, stored := w.snapshot()
		return stored == 2, "second message stored"
	})
	waitFor(t, 5*time.Second, fetchingAgain)
	clock.advance(30 * time.Second)
	if err := c.Healthy(); err != nil {
		t.Errorf("Healthy before StallTimeout: %v", err)
	}
	clock.advance(31 * time.Second)
	err := c.Healthy()
	if err == nil || !strings.Contains(err.Error(), "10 messages wait on topic t partition 0") {
		t.Errorf("Healthy after StallTimeout on a backlog = %v, want a stall error", err)
	}

	// A rebalance may have moved the partition away: the backlog is unknown.
	r.rebalances.Store(1)
	if err := c.Healthy(); err != nil {
		t.Errorf("Healthy after a rebalance: %v", err)
	}
	if c.LastProgress().IsZero() {
		t.Error("LastProgress is zero after progress")
	}
}

// Run returns in bounded time even when closing the reader blocks, as a
// kafka-go reader does while a group join is pending.
func TestCloseIsBounded(t *testing.T) {
	t.Parallel()
	r := newFakeReader()
	r.closeGate = make(chan struct{})
	_, run := unitConsumer(t, &fakeWriter{}, r, func(cfg *Config) { cfg.CloseTimeout = 100 * time.Millisecond })
	stop := run()
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Run took %s to return with a blocked Close", took)
	}
	// Let the abandoned Close finish so that no goroutine outlives the test.
	close(r.closeGate)
	<-r.closed
}

// Ready needs the brokers: while they do not answer probes, ingest is not
// ready (and the gauge says 0), though every write succeeds; it is ready
// again once they answer. The lag the probe reports is published.
func TestReadyFollowsBrokerReachability(t *testing.T) {
	t.Parallel()
	probe := &fakeProbe{err: errors.New("dial tcp: connection refused"), lags: map[topicPartition]int64{{"t", 0}: 42}}
	c, run := unitConsumer(t, &fakeWriter{}, newFakeReader(), func(cfg *Config) { cfg.LagInterval = 10 * time.Millisecond })
	c.probe = probe
	stop := run()
	defer func() { _ = stop() }()
	waitFor(t, 5*time.Second, func() (bool, string) {
		return testutil.ToFloat64(c.Metrics.BrokerErrors) >= 2, "failed probes counted"
	})
	if c.Ready() || testutil.ToFloat64(c.Metrics.Ready) != 0 {
		t.Fatal("ready while the brokers cannot be reached")
	}
	probe.set(nil)
	waitFor(t, 5*time.Second, func() (bool, string) {
		return c.Ready() && testutil.ToFloat64(c.Metrics.Ready) == 1, "ready once the brokers answer"
	})
	if got := testutil.ToFloat64(c.Metrics.Lag.WithLabelValues("t", "0")); got != 42 {
		t.Errorf("lag gauge = %v, want the probe's 42", got)
	}
}

// blockingWriter writes nothing until released, and records each batch.
type blockingWriter struct {
	release chan struct{}
	mu      sync.Mutex
	batches [][]string
}

func (w *blockingWriter) WriteBatch(ctx context.Context, rows []ingestcore.Row) (int, error) {
	select {
	case <-w.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.EventID
	}
	w.mu.Lock()
	w.batches = append(w.batches, ids)
	w.mu.Unlock()
	return len(rows), nil
}

func (w *blockingWriter) snapshot() [][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]string(nil), w.batches...)
}

// The next batch fills while the previous one is written, and no further:
// with the writer stuck on the first batch, the second fills up (fetching
// overlaps writing) and then fetching stops (two batches in hand at most).
// Written, they are committed in order.
func TestNextBatchFillsWhileTheWriterWorks(t *testing.T) {
	t.Parallel()
	w := &blockingWriter{release: make(chan struct{})}
	r := newFakeReader()
	c, run := unitConsumer(t, w, r, nil) // BatchSize 3
	stop := run()
	for i, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		r.msgs <- msg(0, int64(i), id)
	}
	waitFor(t, 5*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(c.Metrics.MessagesFetched)
		return n == 6, fmt.Sprintf("%v messages fetched while the first batch is being written", n)
	})
	if n, left := testutil.ToFloat64(c.Metrics.MessagesFetched), len(r.msgs); n != 6 || left != 2 {
		t.Fatalf("%v messages fetched and %d left in the reader, want 6 and 2 (two batches in hand)", n, left)
	}
	close(w.release)
	// Once the first two are written the writer is idle, and g and h (in
	// hand) go at once, or at the latest at shutdown.
	waitFor(t, 5*time.Second, func() (bool, string) {
		got := r.committed()
		return got[0] >= 6, fmt.Sprintf("committed %v", got)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := r.committed(); got[0] != 8 {
		t.Errorf("committed %v after shutdown, want 8", got)
	}
	want := [][]string{{"a", "b", "c"}, {"d", "e", "f"}, {"g", "h"}}
	if got := w.snapshot(); !reflect.DeepEqual(got, want) {
		t.Errorf("batches written %v, want %v", got, want)
	}
}

// A lone message goes to the inbox at once while the writer is idle: it
// does not wait for the batch timeout (an hour here) but for Linger.
func TestLoneMessageWrittenWithoutWaitingForTheBatchTimeout(t *testing.T) {
	t.Parallel()
	w := &fakeWriter{}
	r := newFakeReader()
	_, run := unitConsumer(t, w, r, func(c *Config) { c.BatchSize = 500; c.Linger = 5 * time.Millisecond })
	run()
	r.msgs <- msg(0, 41, "lone")
	waitFor(t, 5*time.Second, func() (bool, string) {
		_, stored := w.snapshot()
		return stored == 1, "the lone message not written"
	})
	waitFor(t, 5*time.Second, func() (bool, string) {
		got := r.committed()
		return got[0] == 42, fmt.Sprintf("committed %v", got)
	})
}
