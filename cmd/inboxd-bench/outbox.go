package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The outbox measurement (-run outbox): the relay of `inboxd run`
// (INBOXD_OUTBOX=true, publish only: INBOXD_KAFKA_BROKERS without
// INBOXD_KAFKA_TOPICS, no routes) publishing a table filled beforehand to a
// kfake topic, beside a raw franz-go producer with the relay's settings
// publishing the same messages from memory (the ceiling); then the latency
// from a writer's commit to a consumer of the topic at half the relay's
// rate.
const (
	// outboxTopic is the topic the outbox rows are published to, seeded in
	// outboxPartitions partitions.
	outboxTopic      = "outbox-bench"
	outboxPartitions = 4
	// outboxEventType is every outbox row's event type.
	outboxEventType = "bench.outbox"
	// outboxPayloadBytes is every outbox row's payload size.
	outboxPayloadBytes = 1024
	// outboxWriters are the connections of the latency run's writer: one
	// row per transaction, several transactions in flight, so that commits
	// (a WAL flush each) are not the writer's bound.
	outboxWriters = 8
	// outboxRelayLinger and outboxRelayBatchMax are the relay's Kafka
	// producer settings (internal/outbox's kafkaLinger and its
	// DefaultKafkaMaxMessageBytes batch bound), which the ceiling takes too.
	outboxRelayLinger   = time.Millisecond
	outboxRelayBatchMax = 1 << 20
)

// outboxDestination is the rows' destination column.
var outboxDestination = "kafka:" + outboxTopic

// outboxPayload is a 1 KiB JSON payload; the latency run writes its commit
// stamp over its first 8 bytes.
var outboxPayload = func() []byte {
	b := []byte(`{"order_id":12345,"amount":"99.90","currency":"EUR","note":"`)
	for len(b) < outboxPayloadBytes-2 {
		b = append(b, 'x')
	}
	return append(b, '"', '}')
}()

// outboxKey is the key of message i over keys keys.
func outboxKey(i, keys int) string { return "order-" + strconv.Itoa(i%keys) }

// outboxEventID is message i's event id, the same in the table and for
// the ceiling.
func outboxEventID(i int) string { return "ob-" + strconv.Itoa(i) }

// newOutboxCluster starts a one-broker kfake cluster with the outbox topic.
func newOutboxCluster() (*kfake.Cluster, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(outboxPartitions, outboxTopic))
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	return c, nil
}

// outboxDaemonEnv is the environment of a daemon that only relays the
// outbox to the brokers: no source topics, no routes; extra is appended.
func outboxDaemonEnv(db *database, brokers []string, extra ...string) []string {
	env := []string{"INBOXD_LOG_LEVEL=warn", "INBOXD_SHUTDOWN_TIMEOUT=5s"}
	env = append(env, daemonOverrides()...)
	return append(append(env,
		"INBOXD_DATABASE_URL="+db.url,
		"INBOXD_HTTP_ADDR=",
		"INBOXD_OUTBOX=true",
		"INBOXD_KAFKA_BROKERS="+brokers[0],
	), extra...)
}

// fillOutbox inserts n pending rows (event ids ob-0 … ob-(n-1), keys over
// keys keys, payload(i) each) with COPY, in one transaction committed
// before the measurement, then vacuums and analyzes the table as autovacuum
// would (the server here runs without it).
func fillOutbox(ctx context.Context, pool *pgxpool.Pool, n, keys int, payload func(i int) []byte) error {
	rows := make([][]any, n)
	for i := range rows {
		rows[i] = []any{outboxDestination, outboxEventID(i), outboxEventType, outboxKey(i, keys), payload(i)}
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"outbox"}, []string{"destination", "event_id", "event_type", "key", "payload"},
		pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("copy into outbox: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE outbox`); err != nil {
		return fmt.Errorf("vacuum outbox: %w", err)
	}
	return nil
}

// waitOutboxDrained waits until no row of the outbox is pending, polling
// the partial index of pending rows (cheap); exited, when it fires, means
// the daemon stopped early.
func waitOutboxDrained(ctx context.Context, pool *pgxpool.Pool, d *daemon, limit time.Duration) error {
	const poll = 10 * time.Millisecond
	deadline := time.Now().Add(limit)
	for {
		var pending bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox WHERE status = 'pending')`).Scan(&pending); err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		if !pending {
			return nil
		}
		select {
		case code := <-d.exited():
			return fmt.Errorf("daemon stopped early with exit code %d:\n%s", code, d.stderr.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outbox rows still pending after %s:\n%s", limit, d.stderr.String())
		}
	}
}

// benchOutbox measures the relay once: n rows of outboxPayload committed
// to the outbox of a fresh database, then the clock runs from app.Main
// (relay start and shard leases included) until no row is pending; it
// checks that all n are published and that the topic holds n records.
func benchOutbox(ctx context.Context, env *environment, n, keys int) (Rate, error) {
	return benchOutboxWith(ctx, env, n, keys, func(int) []byte { return outboxPayload }, nil, nil)
}

// benchOutboxWith is benchOutbox with the payload of row i payload(i), the
// daemon's environment extended by extra, and wire, when not nil, called
// with the cluster's brokers once the rows are published, before the
// cluster stops.
func benchOutboxWith(ctx context.Context, env *environment, n, keys int, payload func(i int) []byte, extra []string,
	wire func(brokers []string) error) (Rate, error) {
	db, pool, done, err := env.open(ctx, 0)
	if err != nil {
		return Rate{}, err
	}
	defer done()
	if err := fillOutbox(ctx, pool, n, keys, payload); err != nil {
		return Rate{}, err
	}
	cluster, err := newOutboxCluster()
	if err != nil {
		return Rate{}, err
	}
	defer cluster.Close()

	meter, err := startCPUMeter(ctx, pool, db)
	if err != nil {
		return Rate{}, err
	}
	start := time.Now()
	d := startDaemon(ctx, outboxDaemonEnv(db, cluster.ListenAddrs(), extra...))
	err = waitOutboxDrained(ctx, pool, d, 10*time.Minute)
	elapsed := time.Since(start)
	var cpu *CPUUse
	if err == nil {
		cpu, err = meter.stop(ctx)
	}
	if serr := d.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return Rate{}, err
	}
	var published, other int
	var first time.Time
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'published'), count(*) FILTER (WHERE status <> 'published'),
			coalesce(min(published_at), now()) FROM outbox`).Scan(&published, &other, &first); err != nil {
		return Rate{}, err
	}
	if published != n || other != 0 {
		return Rate{}, fmt.Errorf("%d published and %d other outbox rows, want %d published:\n%s", published, other, n, d.stderr.String())
	}
	if got, err := topicRecords(ctx, cluster.ListenAddrs()); err != nil {
		return Rate{}, err
	} else if got < int64(n) {
		return Rate{}, fmt.Errorf("the topic holds %d records, want at least %d", got, n)
	}
	if wire != nil {
		if err := wire(cluster.ListenAddrs()); err != nil {
			return Rate{}, err
		}
	}
	r := newRate("outbox", "inboxd outbox relay → Kafka", n, elapsed)
	r.StartupSeconds = max(first.Sub(start).Seconds(), 0)
	r.CPU = cpu
	return r, nil
}

// topicRecords is the number of records in the outbox topic: the sum of its
// partitions' end offsets.
func topicRecords(ctx context.Context, brokers []string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	offsets, err := kadm.NewClient(cl).ListEndOffsets(ctx, outboxTopic)
	if err != nil {
		return 0, fmt.Errorf("end offsets: %w", err)
	}
	var total int64
	offsets.Each(func(o kadm.ListedOffset) { total += o.Offset })
	return total, nil
}

// outboxProducer is a franz-go producer with the relay's settings:
// acks=all, idempotent (franz-go's default), a 1 ms linger, 1 MiB
// batches and the relay's default codec (outbox.DefaultKafkaCompression,
// gzip).
func outboxProducer(brokers []string) (*kgo.Client, error) {
	return kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(outboxRelayLinger),
		kgo.ProducerBatchMaxBytes(outboxRelayBatchMax),
		kgo.ProducerBatchCompression(kgo.GzipCompression()),
	)
}

// benchOutboxCeiling publishes the messages of benchOutbox from memory with
// a raw producer of the relay's settings to a fresh cluster of the same
// kind: the same keys, payloads and event_id/event_type headers. The clock
// runs from the first Produce to the last acknowledgement.
func benchOutboxCeiling(ctx context.Context, n, keys int) (Rate, error) {
	cluster, err := newOutboxCluster()
	if err != nil {
		return Rate{}, err
	}
	defer cluster.Close()
	cl, err := outboxProducer(cluster.ListenAddrs())
	if err != nil {
		return Rate{}, err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: outboxTopic, Key: []byte(outboxKey(i, keys)), Value: outboxPayload, Headers: []kgo.RecordHeader{
			{Key: "event_id", Value: []byte(outboxEventID(i))}, {Key: "event_type", Value: []byte(outboxEventType)}}}
	}
	var mu sync.Mutex
	var firstErr error
	var acked int
	self0 := selfCPU()
	start := time.Now()
	for _, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if err == nil {
				acked++
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return Rate{}, fmt.Errorf("flush: %w", err)
	}
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return Rate{}, fmt.Errorf("produce: %w", firstErr)
	}
	if acked != n {
		return Rate{}, fmt.Errorf("%d records acknowledged, want %d", acked, n)
	}
	r := newRate("outbox-publish", "raw franz-go producer, relay's settings", n, elapsed)
	r.CPU = &CPUUse{Process: selfCPU() - self0, Wall: elapsed.Seconds()}
	return r, nil
}

// OutboxResults is the outbox measurement.
type OutboxResults struct {
	// Events is the rows (and records) of each throughput run.
	Events int `json:"events"`
	// Keys is how many distinct keys they spread over.
	Keys int `json:"keys"`
	// PayloadBytes is each row's payload size.
	PayloadBytes int `json:"payload_bytes"`
	// Runs are the relay's runs and the ceiling's, alternating, relay
	// first.
	Runs []Rate `json:"runs"`
	// PairRatios are each relay run divided by the ceiling run after it.
	PairRatios []float64 `json:"pair_ratios"`
	// Ratio is the median relay rate divided by the median ceiling rate
	// (the rates "outbox" and "outbox-publish" of Results.Rates).
	Ratio float64 `json:"ratio"`
	// Latency is the run at a fraction of the relay's rate, when it ran.
	Latency *OutboxLatency `json:"latency,omitempty"`
}

// OutboxLatency is the latency from a writer's commit to a consumer of the
// topic, with the relay publishing.
type OutboxLatency struct {
	// Load is the fraction offered of the sustainable rate: the lower of
	// the median relay rate and WriterCapacity.
	Load float64 `json:"load"`
	// WriterCapacity is the rate at which the writer, unthrottled, commits
	// one row per transaction while the relay publishes them: on a small
	// machine the writers, not the relay, are the limit, and half the
	// relay's rate from a full table is more than they can offer.
	WriterCapacity float64 `json:"writer_capacity"`
	// Offered is the offered rate, rows (transactions) per second.
	Offered float64 `json:"offered"`
	// Written is the rate the writer achieved.
	Written float64 `json:"written"`
	// Events is how many rows were written, one per transaction.
	Events int `json:"events"`
	// Seconds is how long the writer wrote.
	Seconds float64 `json:"seconds"`
	// CommitToConsumed is the consumer's receipt time minus the stamp the
	// writer put in the payload just before sending the INSERT (which
	// commits on its own): an upper bound on commit → broker
	// acknowledgement, the insert and the commit's own time and the
	// consumer's fetch included.
	CommitToConsumed Percentiles `json:"commit_to_consumed"`
	// CreatedToPublished is published_at − created_at in the table: the
	// relay's own publish latency (the inboxd_outbox_publish_latency
	// metric's), from the writing transaction's start to the statement
	// that marks the row published, after the acknowledgement.
	CreatedToPublished Percentiles `json:"created_to_published"`
	// CPU is the run's CPU time: this process (the daemon, kfake, the
	// writer and the consumer) and the database's backends.
	CPU *CPUUse `json:"cpu,omitempty"`
}

// outboxMedian is the run of rs with the median rate (the lower middle one
// for an even count).
func outboxMedian(rs []Rate) Rate {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b Rate) int {
		switch {
		case a.PerSecond < b.PerSecond:
			return -1
		case a.PerSecond > b.PerSecond:
			return 1
		}
		return 0
	})
	return s[(len(s)-1)/2]
}

// benchOutboxRuns alternates runs relay, ceiling, relay, … (runs of each)
// and returns the median of each, relay first, for Results.Rates, with the
// runs themselves; with latency > 0 it then runs benchOutboxLatency at load
// of the median relay rate for that long.
func benchOutboxRuns(ctx context.Context, env *environment, n, keys, runs int, load float64, latency time.Duration, logf func(string, ...any)) ([]Rate, *OutboxResults, error) {
	res := &OutboxResults{Events: n, Keys: keys, PayloadBytes: outboxPayloadBytes}
	var relay, ceiling []Rate
	for i := range runs {
		r, err := benchOutbox(ctx, env, n, keys)
		if err != nil {
			return nil, nil, fmt.Errorf("relay run %d: %w", i+1, err)
		}
		c, err := benchOutboxCeiling(ctx, n, keys)
		if err != nil {
			return nil, nil, fmt.Errorf("ceiling run %d: %w", i+1, err)
		}
		relay, ceiling = append(relay, r), append(ceiling, c)
		res.Runs = append(res.Runs, r, c)
		res.PairRatios = append(res.PairRatios, r.PerSecond/c.PerSecond)
		logf("  run %d: relay %9.0f msg/s (%.2fs, first published after %.2fs), raw producer %9.0f msg/s: %.3f",
			i+1, r.PerSecond, r.Seconds, r.StartupSeconds, c.PerSecond, r.PerSecond/c.PerSecond)
	}
	mr, mc := outboxMedian(relay), outboxMedian(ceiling)
	res.Ratio = mr.PerSecond / mc.PerSecond
	if latency > 0 {
		lat, err := benchOutboxLatency(ctx, env, keys, load, mr.PerSecond, latency)
		if err != nil {
			return nil, nil, fmt.Errorf("latency: %w", err)
		}
		lat.Load = load
		res.Latency = lat
		logf("  latency at %.0f%% of min(relay, writer capacity %.0f rows/s) (%.0f rows/s offered, %.0f written, one per transaction): commit→consumed p50 %.1f p95 %.1f p99 %.1f max %.1f ms; created→published p50 %.1f p99 %.1f ms",
			load*100, lat.WriterCapacity, lat.Offered, lat.Written, lat.CommitToConsumed.P50MS, lat.CommitToConsumed.P95MS, lat.CommitToConsumed.P99MS,
			lat.CommitToConsumed.MaxMS, lat.CreatedToPublished.P50MS, lat.CreatedToPublished.P99MS)
	}
	return []Rate{mr, mc}, res, nil
}

// benchOutboxLatency runs the relay on a fresh database and cluster while
// a writer inserts one row per transaction at rate per second for d (in
// steps of 2 ms, over outboxWriters connections), each payload stamped with
// the time just before its INSERT was sent (unix nanoseconds, big endian,
// in its first 8 bytes); a consumer of the topic in this process records,
// per message, its receipt time minus that stamp. A warm-up (leases taken,
// the producer connected, the consumer at the topic's end) comes first and
// is not counted.
func benchOutboxLatency(ctx context.Context, env *environment, keys int, load, relayRate float64, d time.Duration) (*OutboxLatency, error) {
	db, pool, done, err := env.open(ctx, outboxWriters+2)
	if err != nil {
		return nil, err
	}
	defer done()
	cluster, err := newOutboxCluster()
	if err != nil {
		return nil, err
	}
	defer cluster.Close()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(outboxTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer consumer.Close()

	dm := startDaemon(ctx, outboxDaemonEnv(db, cluster.ListenAddrs()))
	defer func() { _ = dm.stop() }()

	// The writer's capacity with the relay running: unthrottled for 3 s.
	capacity, err := outboxWriterCapacity(ctx, pool, keys, 3*time.Second)
	if err != nil {
		return nil, err
	}
	rate := load * min(relayRate, capacity)
	if err := waitOutboxDrained(ctx, pool, dm, 5*time.Minute); err != nil {
		return nil, err
	}

	// Warm-up: 100 rows through relay and consumer.
	const warm = 100
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (destination, event_type, key, payload)
		SELECT $1, $2, 'warm-' || g, $3 FROM generate_series(1, $4::int) g`, outboxDestination, outboxEventType, outboxPayload, warm); err != nil {
		return nil, fmt.Errorf("warm-up insert: %w", err)
	}
	for seen := 0; seen < warm; {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		fs := consumer.PollFetches(fctx)
		err := fctx.Err()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("warm-up: %d of %d records consumed: %w:\n%s", seen, warm, err, dm.stderr.String())
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return nil, fmt.Errorf("warm-up consume: %v", errs[0].Err)
		}
		seen += fs.NumRecords()
	}
	var lo int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM outbox`).Scan(&lo); err != nil {
		return nil, err
	}

	measured := time.Now() // stamps of the measured rows are later
	meter, err := startCPUMeter(ctx, pool, db)
	if err != nil {
		return nil, err
	}
	// The consumer: delays of the stamped records, until want of them are in
	// (want is known once the writer stops).
	var want atomic.Int64
	want.Store(-1)
	delays := make(chan []float64, 1)
	cctx, cancelConsumer := context.WithCancel(ctx)
	defer cancelConsumer()
	go func() {
		var ds []float64
		defer func() { delays <- ds }()
		for cctx.Err() == nil {
			// Short polls, so that the count is checked once want is known
			// even when every record is already in.
			pctx, cancel := context.WithTimeout(cctx, 100*time.Millisecond)
			fs := consumer.PollFetches(pctx)
			cancel()
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				// Only the writer's stamped rows: the capacity run's and
				// the warm-up's, consumed here if the warm-up left them,
				// carry no stamp of the measured run.
				if len(r.Value) >= 8 {
					stamp := int64(binary.BigEndian.Uint64(r.Value))
					if stamp >= measured.UnixNano() && stamp <= now.UnixNano() {
						ds = append(ds, float64(now.UnixNano()-stamp)/1e6)
					}
				}
			})
			if w := want.Load(); w >= 0 && int64(len(ds)) >= w {
				return
			}
		}
	}()

	// The writer: due rows handed to outboxWriters connections.
	jobs := make(chan int, 4096)
	var wg sync.WaitGroup
	var writeErr atomic.Pointer[error]
	for range outboxWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := slices.Clone(outboxPayload)
			for i := range jobs {
				if writeErr.Load() != nil {
					continue
				}
				binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
				if _, err := pool.Exec(ctx, `INSERT INTO outbox (destination, event_type, key, payload) VALUES ($1, $2, $3, $4)`,
					outboxDestination, outboxEventType, outboxKey(i, keys), payload); err != nil {
					writeErr.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	tick := time.NewTicker(2 * time.Millisecond)
	start := time.Now()
	n := 0
	for time.Since(start) < d && ctx.Err() == nil && writeErr.Load() == nil {
		for due := int(rate * time.Since(start).Seconds()); n < due; n++ {
			jobs <- n
		}
		<-tick.C
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	written := time.Since(start)
	if p := writeErr.Load(); p != nil {
		return nil, fmt.Errorf("write: %w", *p)
	}
	want.Store(int64(n))
	drained := make(chan error, 1)
	go func() { drained <- waitOutboxDrained(ctx, pool, dm, 5*time.Minute) }()
	if err := <-drained; err != nil {
		return nil, err
	}
	var ds []float64
	select {
	case ds = <-delays:
	case <-time.After(time.Minute):
		cancelConsumer()
		ds = <-delays
	}
	cpu, err := meter.stop(ctx)
	if err != nil {
		return nil, err
	}
	if len(ds) < n {
		return nil, fmt.Errorf("the consumer received %d of %d records within a minute of the last publication", len(ds), n)
	}
	lat := &OutboxLatency{WriterCapacity: capacity, Offered: rate, Written: float64(n) / written.Seconds(), Events: n, Seconds: written.Seconds(), CPU: cpu}
	lat.CommitToConsumed = Percentiles{P50MS: percentile(ds, 0.5), P95MS: percentile(ds, 0.95), P99MS: percentile(ds, 0.99), MaxMS: slices.Max(ds)}
	var pct []float64
	if err := pool.QueryRow(ctx, `SELECT
			percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at) * 1000),
			max(extract(epoch FROM published_at - created_at) * 1000)
		FROM outbox WHERE id > $1 AND status = 'published'`, lo).Scan(&pct, &lat.CreatedToPublished.MaxMS); err != nil {
		return nil, err
	}
	lat.CreatedToPublished.P50MS, lat.CreatedToPublished.P95MS, lat.CreatedToPublished.P99MS = pct[0], pct[1], pct[2]
	if err := dm.stop(); err != nil {
		return nil, err
	}
	return lat, nil
}

// outboxWriterCapacity is how many rows per second outboxWriters
// connections commit, one per transaction, as fast as they can for d.
func outboxWriterCapacity(ctx context.Context, pool *pgxpool.Pool, keys int, d time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, outboxWriters)
	start := time.Now()
	for w := range outboxWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ctx.Err() == nil; i += outboxWriters {
				if _, err := pool.Exec(ctx, `INSERT INTO outbox (destination, event_type, key, payload) VALUES ($1, $2, $3, $4)`,
					outboxDestination, outboxEventType, outboxKey(i, keys), outboxPayload); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, fmt.Errorf("writer capacity: %w", err)
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

// The codec measurement (-run outbox-codecs): the relay of benchOutbox
// publishing the same table once with each INBOXD_OUTBOX_KAFKA_COMPRESSION
// of outboxCodecs, in turn, one run each, the rows' payloads
// outboxEventPayload (1 KiB JSON events whose fields vary as real ones do,
// so that they compress as real ones do, not as the padding of
// outboxPayload), and the bytes on the wire: the record batches as the
// relay produced them (kfake stores them so), read back by a consumer
// whose fetch hook adds up each batch's bytes.
var outboxCodecs = []string{"none", "gzip", "snappy"}

// kafkaBatchOverhead is a v2 record batch's header, which the fetch hook's
// sizes leave out.
const kafkaBatchOverhead = 61

// OutboxCodecRun is one relay run of the codec measurement.
type OutboxCodecRun struct {
	// Codec is the INBOXD_OUTBOX_KAFKA_COMPRESSION of the run.
	Codec string `json:"codec"`
	// Rate is the relay's rate, as benchOutbox measures it.
	Rate Rate `json:"rate"`
	// Batches is how many record batches the topic holds.
	Batches int `json:"batches"`
	// WireBytes is the batches' bytes as produced: their records,
	// compressed when the codec made them smaller, and their headers.
	WireBytes int64 `json:"wire_bytes"`
	// RecordBytes is the records' bytes uncompressed.
	RecordBytes int64 `json:"record_bytes"`
	// BytesPerMessage is WireBytes per message.
	BytesPerMessage float64 `json:"bytes_per_message"`
}

// outboxEventPayload is message i's payload for the codec measurement: an
// order event of about 1 KiB in JSON, its ids, amounts, lines and note
// drawn from i.
func outboxEventPayload(i int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 7))
	words := []string{"gift", "wrap", "leave", "at", "door", "ring", "twice", "fragile", "express", "weekend",
		"office", "reception", "invoice", "attached", "call", "before", "delivery", "back", "garden"}
	b := fmt.Appendf(nil, `{"order_id":"%016x","customer_id":"c-%08x","created_at":"2026-%02d-%02dT%02d:%02d:%02dZ","currency":"EUR","lines":[`,
		r.Uint64(), r.Uint32(), 1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60))
	for j := range 1 + r.IntN(6) {
		if j > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"sku":"SKU-%05d","qty":%d,"unit_price":"%d.%02d"}`, r.IntN(100000), 1+r.IntN(9), r.IntN(500), r.IntN(100))
	}
	b = fmt.Appendf(b, `],"shipping":{"street":"%d %s street","city":"city-%04d","zip":"%05d"},"note":"`,
		1+r.IntN(300), words[r.IntN(len(words))], r.IntN(10000), r.IntN(100000))
	for len(b) < outboxPayloadBytes-2 {
		b = append(b, words[r.IntN(len(words))]...)
		b = append(b, ' ')
	}
	return append(b[:outboxPayloadBytes-2], '"', '}')
}

// benchOutboxCodecs runs the codec measurement: n rows over keys keys per
// run.
func benchOutboxCodecs(ctx context.Context, env *environment, n, keys int, logf func(string, ...any)) ([]OutboxCodecRun, error) {
	var out []OutboxCodecRun
	for _, codec := range outboxCodecs {
		run := OutboxCodecRun{Codec: codec}
		r, err := benchOutboxWith(ctx, env, n, keys, outboxEventPayload, []string{"INBOXD_OUTBOX_KAFKA_COMPRESSION=" + codec},
			func(brokers []string) error { return outboxWireBytes(ctx, brokers, n, &run) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", codec, err)
		}
		r.Name, r.Label = "outbox-"+codec, "inboxd outbox relay → Kafka, "+codec
		run.Rate = r
		run.BytesPerMessage = float64(run.WireBytes) / float64(n)
		out = append(out, run)
		cpu := ""
		if r.CPU != nil {
			cpu = fmt.Sprintf(", CPU %.1f + %.1f µs/message (process + PostgreSQL)", r.CPU.Process/float64(n)*1e6, r.CPU.Postgres/float64(n)*1e6)
		}
		logf("  %-7s relay %9.0f msg/s (%.2fs%s): %d batches, %.0f bytes/message on the wire (records %.0f uncompressed)",
			codec, r.PerSecond, r.Seconds, cpu, run.Batches, run.BytesPerMessage, float64(run.RecordBytes)/float64(n))
	}
	return out, nil
}

// outboxWireBytes reads the outbox topic's n records from its start and
// fills run's batch count and sizes from the fetch hook.
func outboxWireBytes(ctx context.Context, brokers []string, n int, run *OutboxCodecRun) error {
	h := &batchSizes{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(outboxTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(h))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for read := 0; read < n; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %d of %d records back: %w", read, n, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return fmt.Errorf("read back: %w", errs[0].Err)
		}
		read += fs.NumRecords()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	run.Batches, run.RecordBytes = h.batches, h.uncompressed
	run.WireBytes = h.compressed + int64(h.batches)*kafkaBatchOverhead
	return nil
}

// batchSizes adds up the sizes of the batches a consumer fetches.
type batchSizes struct {
	mu                       sync.Mutex
	batches                  int
	compressed, uncompressed int64
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (h *batchSizes) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches++
	h.compressed += int64(m.CompressedBytes)
	h.uncompressed += int64(m.UncompressedBytes)
}
