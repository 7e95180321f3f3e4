package kafka

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/testkit"
)

// fakeReader stands in for *kafka.Reader in unit tests of the consumer loop.
type fakeReader struct {
	msgs       chan kafka.Message
	rebalances atomic.Int64
	closeGate  chan struct{} // when set, Close waits for it to be closed
	closed     chan struct{}

	mu      sync.Mutex
	commits [][]kafka.Message
}

func newFakeReader() *fakeReader {
	return &fakeReader{msgs: make(chan kafka.Message, 1000), closed: make(chan struct{})}
}

func (f *fakeReader) FetchMessage(ctx context.Context) (kafka.Message, error) {
	select {
	case m := <-f.msgs:
		return m, nil
	case <-ctx.Done():
		return kafka.Message{}, ctx.Err()
	}
}

func (f *fakeReader) CommitMessages(_ context.Context, msgs ...kafka.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits = append(f.commits, append([]kafka.Message(nil), msgs...))
	return nil
}

// committed returns the committed offset (next to read) per partition.
func (f *fakeReader) committed() map[int]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int]int64{}
	for _, c := range f.commits {
		for _, m := range c {
			out[m.Partition] = max(out[m.Partition], m.Offset+1)
		}
	}
	return out
}

func (f *fakeReader) Stats() kafka.ReaderStats {
	return kafka.ReaderStats{Rebalances: f.rebalances.Swap(0)}
}

func (f *fakeReader) Close() error {
	if f.closeGate != nil {
		<-f.closeGate
	}
	close(f.closed)
	return nil
}

// fakeWriter records every attempt and fails while failing is set.
type fakeWriter struct {
	failing atomic.Bool

	mu       sync.Mutex
	attempts [][]string // event ids of each attempt
	stored   map[string]bool
}

func (w *fakeWriter) WriteBatch(_ context.Context, rows []ingestcore.Row) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.EventID
	}
	w.attempts = append(w.attempts, ids)
	if w.failing.Load() {
		return 0, errTestDown
	}
	if w.stored == nil {
		w.stored = map[string]bool{}
	}
	n := 0
	for _, id := range ids {
		if !w.stored[id] {
			w.stored[id] = true
			n++
		}
	}
	return n, nil
}

func (w *fakeWriter) snapshot() (attempts [][]string, stored int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]string(nil), w.attempts...), len(w.stored)
}

type testError string

func (e testError) Error() string { return string(e) }

const errTestDown = testError("database is down (test)")

// fakeClock is a settable clock safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// unitConsumer builds a consumer on fakes; the returned run starts Run in a
// goroutine and the stop function cancels it and waits for it to return.
func unitConsumer(t *testing.T, w ingestcore.InboxWriter, r *fakeReader, mutate func(*Config)) (*kafkaConsumer, func() (stop func() error)) {
	t.Helper()
	cfg := Config{
		Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, Group: "g",
		PipelineConfig: ingest.PipelineConfig{BatchSize: 3, BatchTimeout: time.Hour, Linger: time.Hour,
			CloseTimeout: 2 * time.Second},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := newConsumer(cfg, w, zerolog.New(zerolog.NewTestWriter(t)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c.newReader = func(kafka.ReaderConfig) messageReader { return r }
	c.probe = &fakeProbe{}
	c.Backoff = func(int) time.Duration { return time.Millisecond }
	return c, func() func() error {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		var once sync.Once
		var err error
		stop := func() error {
			once.Do(func() {
				cancel()
				select {
				case err = <-done:
				case <-time.After(20 * time.Second):
					t.Fatal("Run did not return within 20s of cancellation")
				}
			})
			return err
		}
		t.Cleanup(func() { _ = stop() })
		return stop
	}
}

// waitFor polls cond until it reports true, failing the test after timeout
// with the last description cond gave.
var waitFor = testkit.WaitForReport

// fakeProbe answers broker probes from fields the test sets.
type fakeProbe struct {
	mu        sync.Mutex
	err       error
	lags      map[topicPartition]int64
	retention map[string]time.Duration
}

func (f *fakeProbe) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeProbe) lag(context.Context) (map[topicPartition]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lags, f.err
}

func (f *fakeProbe) close() {}

func (f *fakeProbe) topicRetention(context.Context, []string) (map[string]time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.retention, f.err
}
