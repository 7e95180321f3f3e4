package faultsuite

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// mixedStream is the workload most fault scenarios share: a Kafka stream
// of events, every third one for the transactional handler (tx.effect),
// the others for the plain http handler (http.effect), consumed by
// embedder daemons in one group.
type mixedStream struct {
	t       *testing.T
	run     *Run
	kafka   *Kafka
	sink    *Sink
	runs    string
	env     []string
	workers int
	lease   time.Duration
	prod    *Production
	n       int
	cancel  context.CancelFunc
}

// mixedConfig shapes a mixedStream.
type mixedConfig struct {
	// DaemonURL is the database URL the daemons use (maybe via a Proxy).
	DaemonURL string
	// Inspect is a pool on the same database that bypasses any proxy.
	Inspect *pgxpool.Pool
	// Lease, Workers: INBOXD_LEASE and INBOXD_WORKERS.
	Lease   time.Duration
	Workers int
	// Events and Rate of the stream; Partitions of the topic.
	Events, Rate int
	Partitions   int32
	// Env is added to every daemon's environment.
	Env []string
}

func newMixedStream(t *testing.T, c mixedConfig) *mixedStream {
	t.Helper()
	m := &mixedStream{t: t, sink: NewSink(t), runs: runsFile(t), workers: c.Workers, lease: c.Lease, n: c.Events}
	m.run = NewRun(t, c.Inspect, m.sink, c.Lease)
	m.kafka = NewKafka(t, "events", KafkaOptions{Partitions: max(c.Partitions, 4)})
	m.run.OnFailure(func() string { return m.kafka.DescribeGroup("faults") })
	m.run.OnFailure(func() string { return inboxByPartition(c.Inspect) })
	m.env = append(append(append(baseEnv(c.DaemonURL, c.Lease, c.Workers), embedderEnv(m.sink, m.runs)...),
		m.kafka.DaemonEnv("faults")...), c.Env...)
	return m
}

// start starts one more embedder daemon.
func (m *mixedStream) start(name string) *Daemon {
	m.t.Helper()
	return StartDaemon(m.t, DaemonSpec{Name: name, Binary: bins.Embedder, Env: m.env})
}

// produce starts the paced stream with rate events/s.
func (m *mixedStream) produce(rate int) {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.t.Cleanup(cancel)
	m.prod = m.kafka.Produce(ctx, Stream{N: m.n, Prefix: "ev-", Type: mixedTypes, Rate: rate})
}

// processed counts processed rows of the stream's topic.
func (m *mixedStream) processed() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int
	_ = m.run.DB.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE source = 'events' AND status = 'processed'`).Scan(&n)
	return n
}

// waitProcessedAtLeast waits until n rows are processed.
func (m *mixedStream) waitProcessedAtLeast(n int, timeout time.Duration) {
	m.t.Helper()
	WaitFor(m.t, timeout, "processing under way", func() bool { return m.processed() >= n })
}

// waitUnderWay waits until a quarter of the stream is acknowledged and
// some of it processed, so a fault lands mid-stream.
func (m *mixedStream) waitUnderWay() {
	m.t.Helper()
	WaitFor(m.t, 60*time.Second, "stream under way", func() bool {
		return m.prod.Count() >= m.n/4 && m.processed() >= min(m.n/10, 100)
	})
	if m.prod.Count() >= m.n {
		m.t.Logf("note: the producer had finished before the fault")
	}
}

// finish checks lease recovery since recoveredAt (the end of the last
// fault), waits for the producer, then for every acknowledged event to be
// processed, and runs the history checks.
func (m *mixedStream) finish(recoveredAt time.Time, timeout time.Duration) {
	m.t.Helper()
	CheckLeasesRecovered(m.t, m.run.DB, recoveredAt, m.lease)
	m.prod.Wait(m.t, scale(120*time.Second))
	if err := m.prod.Err(); err != nil {
		m.t.Logf("producer: %v (unacknowledged events are not expected)", err)
	}
	m.run.Expect("events", m.prod.Acked()...)
	m.run.WaitProcessed(timeout)
	m.run.Check()
}
