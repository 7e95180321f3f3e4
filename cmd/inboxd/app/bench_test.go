package app

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/internal/yardstick"
)

// The end-to-end benchmarks run the whole daemon (app.Main "run") in-process
// against an in-process Kafka cluster (kfake) and a fresh database, with the
// events' type routed to the ignore handler: they measure inboxd — fetch,
// batch insert, offset commit, claim, handler dispatch, batched completion —
// and not the service behind it.
//
// The topic is filled before the clock starts: the timed run then holds what
// the engine's BenchmarkRawPipeline does — rows inserted in batches while workers
// claim and complete them — plus Kafka fetches and offset commits, but not
// the producer, which would take CPU from the daemon and PostgreSQL on these
// two cores. (The broker, kfake, runs in this process and serves the
// fetches inside the timed run; its share of the CPU profile is a few
// percent.) The clock starts when app.Main is
// called (pool creation, schema check and the consumer group join included)
// and stops when every event is a processed row; startup-s says how much of
// that passed before the first row reached the inbox. INBOXD_* variables set
// in the environment (INBOXD_WORKERS, INBOXD_CLAIM_BATCH, …) override the
// daemon's defaults, to compare settings.
//
// `make bench` runs these and the engine's BenchmarkRawPipeline and BenchmarkPool
// in one invocation (benchmarks of different packages run one after
// another), so their events/s can be compared. The target is end to end
// ≥ 0.7× the raw pipeline, with and without millions of retained rows.

const benchTopic = "orders"

// benchPayload is the yardstick's payload, so that every benchmark moves
// the same bytes.
var benchPayload = yardstick.Payload

// benchEnv returns the positive integer in the environment variable name, or
// def.
func benchEnv(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkEndToEnd moves INBOXD_BENCH_EVENTS events (default 100 000) from
// Kafka to processed rows through the daemon, on an empty inbox.
func BenchmarkEndToEnd(b *testing.B) {
	benchEndToEnd(b, 0)
}

// BenchmarkEndToEndRetained is BenchmarkEndToEnd on an inbox that already
// holds INBOXD_BENCH_RETAINED processed rows (default 2 000 000), as
// retention keeps them for deduplication: the partial indexes on the live
// statuses should keep claims and completions as fast as on an empty table.
func BenchmarkEndToEndRetained(b *testing.B) {
	benchEndToEnd(b, benchEnv("INBOXD_BENCH_RETAINED", 2_000_000))
}

func benchEndToEnd(b *testing.B, retained int) {
	n := benchEnv("INBOXD_BENCH_EVENTS", 100_000)
	b.StopTimer()
	var total, startup time.Duration
	for range b.N {
		w := setupBench(b, n, retained)
		b.StartTimer()
		elapsed, firstRow := w.run(b)
		b.StopTimer()
		total += elapsed
		startup += firstRow
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
	b.ReportMetric(startup.Seconds()/float64(b.N), "startup-s")
	b.ReportMetric(0, "ns/op") // one op is a whole run: events/s says it better
}

// benchWorld is one iteration's world: a database, a Kafka cluster whose
// topic holds the events, and the daemon's environment.
type benchWorld struct {
	db      *pgtest.DB
	env     []string
	n       int
	lastIDs []string // event id of the last record of each partition
}

func setupBench(b *testing.B, n, retained int) *benchWorld {
	b.Helper()
	db := pgtest.New(b)
	if retained > 0 {
		retain(b, db, retained)
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, benchTopic))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	lastIDs := produceBench(b, brokers, n)

	routes := filepath.Join(b.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, []byte("routes:\n  - type: bench.event\n    handler: ignore\ndefault: dead\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	// Tunables first, so that INBOXD_* variables in the environment override
	// them; then what the benchmark needs.
	env := []string{"INBOXD_LOG_LEVEL=warn", "INBOXD_SHUTDOWN_TIMEOUT=5s"}
	env = append(env, os.Environ()...)
	env = append(env,
		"INBOXD_DATABASE_URL="+db.URL,
		"INBOXD_KAFKA_BROKERS="+brokers[0],
		"INBOXD_KAFKA_TOPICS="+benchTopic,
		"INBOXD_KAFKA_GROUP=inboxd-bench",
		"INBOXD_KAFKA_START_OFFSET=first",
		"INBOXD_ROUTES="+routes,
		"INBOXD_HTTP_ADDR=",
	)
	return &benchWorld{db: db, env: env, n: n, lastIDs: lastIDs}
}

// retain fills the inbox with m processed rows of the same topic, a day old,
// with random-looking event ids as real ones (UUIDs) are, in one statement,
// then vacuums and analyzes the table as autovacuum eventually would.
func retain(b *testing.B, db *pgtest.DB, m int) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, key, payload, status,
			attempts, kafka_topic, kafka_partition, kafka_offset, received_at, available_at, processed_at, updated_at)
		SELECT $1, md5(g::text), 'bench.event', convert_to('key-' || g, 'UTF8'), $2::bytea, 'processed',
			1, $1, g % 4, g / 4, now() - interval '1 day', now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'
		FROM generate_series(1, $3::int) AS g`, benchTopic, benchPayload, m); err != nil {
		b.Fatalf("insert retained rows: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE inbox`); err != nil {
		b.Fatalf("vacuum: %v", err)
	}
	b.Logf("%d retained processed rows inserted and vacuumed in %s", m, time.Since(start).Round(time.Millisecond))
}

// produceBench produces n events with event_id and event_type headers, keyed
// and spread over the topic's partitions, and returns the event id of the
// last record of each partition.
func produceBench(b *testing.B, brokers []string, n int) []string {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(benchTopic),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	type position struct {
		offset int64
		id     string
	}
	var (
		mu       sync.Mutex
		firstErr error
		last     = map[int32]position{}
	)
	for i := range n {
		id := fmt.Sprintf("ev-%d", i)
		r := &kgo.Record{
			Key:   []byte(fmt.Sprintf("order-%d", i)),
			Value: benchPayload,
			Headers: []kgo.RecordHeader{
				{Key: "event_id", Value: []byte(id)},
				{Key: "event_type", Value: []byte("bench.event")},
			},
		}
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			if l, ok := last[r.Partition]; !ok || r.Offset > l.offset {
				last[r.Partition] = position{r.Offset, id}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatalf("produce: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		b.Fatalf("produce: %v", firstErr)
	}
	ids := make([]string, 0, len(last))
	for _, l := range last {
		ids = append(ids, l.id)
	}
	return ids
}

// run starts the daemon, waits until every event is a processed row, stops
// the daemon and checks the outcome. It returns the time from start to all
// processed, and from start to the first row written to the inbox.
func (w *benchWorld) run(b *testing.B) (elapsed, firstRow time.Duration) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncbuf.Buffer
	done := make(chan int, 1)

	start := time.Now()
	go func() { done <- Main(ctx, []string{"run"}, w.env, &bytes.Buffer{}, &stderr, Options{}) }()

	// Cheap polls only: the last event of each partition (ingest writes each
	// partition in offset order, so once they are in, all are) through the
	// unique index, and live rows through the partial indexes. Counting the
	// table would itself be load.
	const poll = 20 * time.Millisecond
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var present int
		var live bool
		err := w.db.Pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM inbox WHERE source = $1 AND event_id = ANY($2)),
				EXISTS (SELECT 1 FROM inbox WHERE status = 'received')
				OR EXISTS (SELECT 1 FROM inbox WHERE status = 'processing')`,
			benchTopic, w.lastIDs).Scan(&present, &live)
		if err != nil {
			b.Fatalf("poll: %v", err)
		}
		if present == len(w.lastIDs) && !live {
			break
		}
		select {
		case code := <-done:
			b.Fatalf("daemon stopped early with exit code %d:\n%s", code, stderr.String())
		case <-time.After(poll):
		}
		if time.Now().After(deadline) {
			b.Fatalf("not all events processed after 10 minutes:\n%s", stderr.String())
		}
	}
	elapsed = time.Since(start)

	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			b.Fatalf("daemon exit code %d:\n%s", code, stderr.String())
		}
	case <-time.After(time.Minute):
		b.Fatalf("daemon did not stop within a minute of cancellation:\n%s", stderr.String())
	}

	// The new rows are the ones received after start (retained rows are a
	// day old). received_at is the inserting transaction's start, on this
	// machine's clock.
	var processed, other int
	var first time.Time
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT
			count(*) FILTER (WHERE status = 'processed'), count(*) FILTER (WHERE status <> 'processed'),
			coalesce(min(received_at), now())
		FROM inbox WHERE source = $1 AND received_at >= $2`, benchTopic, start).Scan(&processed, &other, &first); err != nil {
		b.Fatal(err)
	}
	if processed != w.n || other != 0 {
		b.Fatalf("%d processed and %d other rows, want %d processed:\n%s", processed, other, w.n, stderr.String())
	}
	return elapsed, first.Sub(start)
}
