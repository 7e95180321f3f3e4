package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/cmd/inboxd/app"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/syncbuf"
)

const (
	// topic is the Kafka topic of every end-to-end measurement, and so the
	// source of its rows.
	topic = "orders"
	// partitions are the topic's partitions, as in BenchmarkEndToEnd.
	partitions = 4
	// eventType is the type of every event; the routes file sends it to
	// the ignore handler.
	eventType = "bench.event"
	// producedAtHeader carries the time a record was handed to the Kafka
	// producer, RFC 3339 with nanoseconds.
	producedAtHeader = "produced_at"
)

// kafka is an in-process Kafka-protocol cluster (kfake) with the topic, and
// a producer on it.
type kafka struct {
	cluster  *kfake.Cluster
	brokers  []string
	producer *kgo.Client
}

// newKafka starts a one-broker cluster with the topic in four partitions.
// maxMessage, when positive, raises the broker's message.max.bytes and the
// producer's batch size for big payloads; linger is the producer's.
func newKafka(maxMessage int, linger time.Duration) (*kafka, error) {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic)}
	copts := []kgo.ProducerOpt{kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(linger)}
	if maxMessage > 0 {
		opts = append(opts, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(maxMessage)}))
		copts = append(copts, kgo.ProducerBatchMaxBytes(int32(maxMessage)), kgo.MaxBufferedBytes(maxMessage*16))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	brokers := cluster.ListenAddrs()
	kopts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic)}
	for _, o := range copts {
		kopts = append(kopts, o)
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		cluster.Close()
		return nil, err
	}
	return &kafka{cluster: cluster, brokers: brokers, producer: cl}, nil
}

func (k *kafka) close() {
	k.producer.Close()
	k.cluster.Close()
}

// record is the record of event i of a run whose ids start with prefix:
// keyed, with event_id and event_type headers, and a produced_at header
// when stamped.
func record(prefix string, i int, payload []byte, stamped bool) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, 3)
	hs = append(hs,
		kgo.RecordHeader{Key: "event_id", Value: []byte(prefix + strconv.Itoa(i))},
		kgo.RecordHeader{Key: "event_type", Value: []byte(eventType)})
	if stamped {
		hs = append(hs, kgo.RecordHeader{Key: producedAtHeader, Value: time.Now().AppendFormat(nil, time.RFC3339Nano)})
	}
	return &kgo.Record{Key: []byte("order-" + strconv.Itoa(i)), Value: payload, Headers: hs}
}

// tracker follows produced records: the first error, and the event id of
// the last record of each partition (ingest writes each partition in offset
// order, so once those are in the inbox, all are).
type tracker struct {
	mu       sync.Mutex
	firstErr error
	last     map[int32]position
	acked    int64
}

type position struct {
	offset int64
	id     string
}

func newTracker() *tracker { return &tracker{last: map[int32]position{}} }

func (t *tracker) promise(id string) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if err != nil {
			if t.firstErr == nil {
				t.firstErr = err
			}
			return
		}
		t.acked++
		if l, ok := t.last[r.Partition]; !ok || r.Offset > l.offset {
			t.last[r.Partition] = position{r.Offset, id}
		}
	}
}

func (t *tracker) result() ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.firstErr != nil {
		return nil, t.firstErr
	}
	ids := make([]string, 0, len(t.last))
	for _, l := range t.last {
		ids = append(ids, l.id)
	}
	return ids, nil
}

// fill produces n records with payload(i) and waits until the broker has
// them all; it returns the last event id of each partition.
func (k *kafka) fill(ctx context.Context, prefix string, n int, payload func(int) []byte) ([]string, error) {
	t := newTracker()
	for i := range n {
		r := record(prefix, i, payload(i), false)
		k.producer.Produce(ctx, r, t.promise(prefix+strconv.Itoa(i)))
	}
	if err := k.producer.Flush(ctx); err != nil {
		return nil, fmt.Errorf("produce: %w", err)
	}
	return t.result()
}

// routesFile writes the routes file of every daemon run: the event type to
// ignore, anything else dead.
func routesFile(dir string) (string, error) {
	path := filepath.Join(dir, "routes.yaml")
	return path, os.WriteFile(path, []byte("routes:\n  - type: "+eventType+"\n    handler: ignore\ndefault: dead\n"), 0o600)
}

// daemonEnv is the daemon's environment for a Kafka run: baseDaemonEnv with
// the topic of k, then extra.
func daemonEnv(db *database, k *kafka, routes string, extra ...string) []string {
	return baseDaemonEnv(db, routes, append([]string{
		"INBOXD_KAFKA_BROKERS=" + k.brokers[0],
		"INBOXD_KAFKA_TOPICS=" + topic,
		"INBOXD_KAFKA_GROUP=inboxd-bench",
		"INBOXD_KAFKA_START_OFFSET=first",
	}, extra...)...)
}

// baseDaemonEnv is the daemon's environment whatever its source: a quiet log
// and a short shutdown first, then the INBOXD_* variables of this process's
// environment (which override them and the daemon's defaults), then what
// the run needs (the database, the routes, no HTTP listener) and extra (the
// source's variables).
func baseDaemonEnv(db *database, routes string, extra ...string) []string {
	env := []string{"INBOXD_LOG_LEVEL=warn", "INBOXD_SHUTDOWN_TIMEOUT=5s"}
	env = append(env, daemonOverrides()...)
	env = append(env,
		"INBOXD_DATABASE_URL="+db.url,
		"INBOXD_ROUTES="+routes,
		"INBOXD_HTTP_ADDR=",
	)
	return append(env, extra...)
}

// daemon is inboxd's daemon running in this process (app.Main "run").
type daemon struct {
	cancel  context.CancelFunc
	done    chan int
	stderr  *syncbuf.Buffer
	metrics *prometheus.Registry // the daemon's metrics
}

func startDaemon(ctx context.Context, env []string) *daemon { return startDaemonWith(ctx, env, nil) }

// startDaemonWith is startDaemon with reg's Go handlers beside the routes
// file's (nil: none).
func startDaemonWith(ctx context.Context, env []string, reg *handlers.Registry) *daemon {
	ctx, cancel := context.WithCancel(ctx)
	d := &daemon{cancel: cancel, done: make(chan int, 1), stderr: &syncbuf.Buffer{}, metrics: prometheus.NewRegistry()}
	go func() {
		d.done <- app.Main(ctx, []string{"run"}, env, io.Discard, d.stderr, app.Options{Registerer: d.metrics, Registry: reg})
	}()
	return d
}

// outcomeWriteDelayP99 is the p99 of inboxd_worker_outcome_write_delay_seconds
// (the time from a handler's success to its outcome's commit: the window in
// which a crash re-runs a handler that already succeeded) over the daemon's
// life, in milliseconds, interpolated within its bucket; false when nothing
// was observed.
func (d *daemon) outcomeWriteDelayP99() (float64, bool) {
	return d.outcomeWriteDelay().since(histogram{}).quantileMS(0.99)
}

// histogram is a snapshot of a Prometheus histogram: its buckets' upper
// bounds (seconds) and cumulative counts, and its sample count.
type histogram struct {
	bounds []float64
	counts []float64
	total  float64
}

// outcomeWriteDelay is the daemon's inboxd_worker_outcome_write_delay_seconds
// now; empty when the daemon has not registered it.
func (d *daemon) outcomeWriteDelay() histogram {
	mfs, err := d.metrics.Gather()
	if err != nil {
		return histogram{}
	}
	for _, mf := range mfs {
		if mf.GetName() != "inboxd_worker_outcome_write_delay_seconds" || len(mf.GetMetric()) == 0 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		out := histogram{total: float64(h.GetSampleCount())}
		for _, b := range h.GetBucket() {
			out.bounds = append(out.bounds, b.GetUpperBound())
			out.counts = append(out.counts, float64(b.GetCumulativeCount()))
		}
		return out
	}
	return histogram{}
}

// since is what h observed after prev, an earlier snapshot of the same
// histogram (empty: everything).
func (h histogram) since(prev histogram) histogram {
	out := histogram{bounds: h.bounds, counts: make([]float64, len(h.counts)), total: h.total - prev.total}
	for i, c := range h.counts {
		out.counts[i] = c
		if i < len(prev.counts) {
			out.counts[i] -= prev.counts[i]
		}
	}
	return out
}

// quantileMS is the q quantile of h in milliseconds, interpolated linearly
// within its bucket as Prometheus's histogram_quantile does (so it is below
// a bucket's bound exactly when that share of the observations is within
// it); false when h observed nothing. Beyond the last bound it is that
// bound.
func (h histogram) quantileMS(q float64) (float64, bool) {
	if h.total <= 0 {
		return 0, false
	}
	want := q * h.total
	prevBound, prevCount := 0.0, 0.0
	for i, count := range h.counts {
		if count >= want {
			frac := (want - prevCount) / max(count-prevCount, 1)
			return 1000 * (prevBound + frac*(h.bounds[i]-prevBound)), true
		}
		prevBound, prevCount = h.bounds[i], count
	}
	return 1000 * prevBound, true
}

// stop cancels the daemon and waits for its exit code.
func (d *daemon) stop() error {
	d.cancel()
	select {
	case code := <-d.done:
		d.done <- code
		if code != app.ExitOK {
			return fmt.Errorf("daemon exit code %d:\n%s", code, d.stderr.String())
		}
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("daemon did not stop within a minute:\n%s", d.stderr.String())
	}
}

// exited is the daemon's exit code channel, for selects.
func (d *daemon) exited() <-chan int { return d.done }

// errNotProcessed is the error of waitProcessed when its time is up.
var errNotProcessed = errors.New("not all events processed")

// waitProcessed waits until the rows of lastIDs (of source) are in the inbox and no row
// is received or processing, with cheap polls only (the unique index and
// the partial indexes: counting the table would itself be load). exited, when
// it fires, means the daemon stopped early.
func waitProcessed(ctx context.Context, pool *pgxpool.Pool, source string, lastIDs []string, exited <-chan int, logs func() string, limit time.Duration) error {
	return pollDaemon(ctx, exited, logs, 20*time.Millisecond, limit, func() (bool, error) {
		var present int
		var live bool
		err := pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM inbox WHERE source = $1 AND event_id = ANY($2)),
				EXISTS (SELECT 1 FROM inbox WHERE status = 'received')
				OR EXISTS (SELECT 1 FROM inbox WHERE status = 'processing')`,
			source, lastIDs).Scan(&present, &live)
		return present == len(lastIDs) && !live, err
	}, func() error { return fmt.Errorf("%w after %s:\n%s", errNotProcessed, limit, logs()) })
}

// pollDaemon calls done every poll until it reports true, and returns nil
// then; it returns done's error, an error with the daemon's logs should it
// exit (exited fires), ctx's, or late()'s once limit has passed.
func pollDaemon(ctx context.Context, exited <-chan int, logs func() string, poll, limit time.Duration,
	done func() (bool, error), late func() error) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := done()
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		if ok {
			return nil
		}
		select {
		case code := <-exited:
			return fmt.Errorf("daemon stopped early with exit code %d:\n%s", code, logs())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
		if time.Now().After(deadline) {
			return late()
		}
	}
}

// profiles names the files an end-to-end run writes its profiles to.
type profiles struct {
	cpu, block, mutex string
}

// benchEndToEnd measures the daemon end to end, as BenchmarkEndToEnd: n
// events are produced to the topic first (the producer would otherwise take
// CPU from the daemon and PostgreSQL), then the clock starts with app.Main
// (pool creation, schema check and consumer group join included) and stops
// when every event is a processed row. With retained > 0 the inbox holds
// that many processed rows first. With claimed, the daemon runs with
// INBOXD_INGEST_HANDOFF=false: every row waits for a claim, as before the
// hand-off at ingest (the run "e2e-claimed", beside "e2e").
func benchEndToEnd(ctx context.Context, env *environment, n, retained int, prof profiles, claimed bool) (Rate, error) {
	db, pool, done, err := env.open(ctx, 0)
	if err != nil {
		return Rate{}, err
	}
	defer done()
	var prep time.Duration
	if retained > 0 {
		start := time.Now()
		if err := retain(ctx, pool, retained); err != nil {
			return Rate{}, err
		}
		prep = time.Since(start)
	}

	k, lastIDs, routes, cleanup, err := filledKafka(ctx, n)
	if err != nil {
		return Rate{}, err
	}
	defer cleanup()

	var writes *writeMeter
	if retained == 0 && prof == (profiles{}) {
		// Not on the retained inbox: pgstattuple would read its 2M rows'
		// indexes twice.
		if writes, err = startWriteMeter(ctx, env, db, "inbox"); err != nil {
			return Rate{}, err
		}
	}
	var extra []string
	if claimed {
		extra = append(extra, "INBOXD_INGEST_HANDOFF=false")
	}
	m, err := measureDaemon(ctx, db, pool, topic, lastIDs, n, daemonEnv(db, k, routes, extra...), prof, "", writes)
	if err != nil {
		return Rate{}, err
	}
	name, label := "e2e", "inboxd end to end"
	switch {
	case retained > 0:
		name, label = "retained", fmt.Sprintf("inboxd end to end, %s retained rows", humanCount(retained))
	case claimed:
		name, label = "e2e-claimed", "inboxd end to end, hand-off off (every row claimed)"
	}
	r := m.rate(name, label, n)
	r.PrepSeconds = prep.Seconds()
	if writes != nil {
		// The daemon has stopped and closed its pool; ours is the last.
		if r.Writes, err = writes.finish(ctx, pool.Close, n); err != nil {
			return Rate{}, err
		}
	}
	return r, nil
}

// daemonRun is what measureDaemon measured.
type daemonRun struct {
	elapsed time.Duration
	startup time.Duration // app.Main to the first row
	cpu     *CPUUse
	p99     float64 // outcome write delay p99, ms; 0 when none observed
}

func (m daemonRun) rate(name, label string, n int) Rate {
	r := newRate(name, label, n, m.elapsed)
	r.StartupSeconds = m.startup.Seconds()
	r.CPU = m.cpu
	r.OutcomeWriteDelayP99MS = m.p99
	return r
}

// measureDaemon starts the daemon in this process with env and times it
// from app.Main until the rows of lastIDs (the last event of each
// partition, queue or stream of source, which ingest writes in order) are in
// the inbox and nothing is received or processing; it then checks that
// exactly n rows of source arrived since the start, all processed. prof are
// the profiles written of the run; broker, when set, is the command name of
// the broker's server process, whose CPU time is measured too; writes, when
// not nil, takes its end snapshot when the clock stops.
func measureDaemon(ctx context.Context, db *database, pool *pgxpool.Pool, source string, lastIDs []string, n int, env []string, prof profiles, broker string, writes *writeMeter) (daemonRun, error) {
	return measureDaemonWith(ctx, db, pool, source, lastIDs, n, env, prof, broker, writes, nil)
}

// measureDaemonWith is measureDaemon with reg's Go handlers in the daemon
// (nil: none).
func measureDaemonWith(ctx context.Context, db *database, pool *pgxpool.Pool, source string, lastIDs []string, n int, env []string, prof profiles, broker string, writes *writeMeter, reg *handlers.Registry) (daemonRun, error) {
	stopProfiles, err := startProfiles(prof)
	if err != nil {
		return daemonRun{}, err
	}
	meter, err := startCPUMeter(ctx, pool, db)
	if err != nil {
		_ = stopProfiles()
		return daemonRun{}, err
	}
	if broker != "" {
		meter.measureBroker(broker)
	}
	start := time.Now()
	d := startDaemonWith(ctx, env, reg)
	err = waitProcessed(ctx, pool, source, lastIDs, d.exited(), d.stderr.String, 10*time.Minute)
	m := daemonRun{elapsed: time.Since(start)}
	if err == nil {
		m.cpu, err = meter.stop(ctx)
	}
	if err == nil && writes != nil {
		err = writes.end(ctx)
	}
	if perr := stopProfiles(); perr != nil && err == nil {
		err = perr
	}
	if p99, ok := d.outcomeWriteDelayP99(); ok {
		m.p99 = p99
	}
	if serr := d.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return daemonRun{}, err
	}

	// The new rows are the ones received after start (retained rows are a
	// day old); received_at is the inserting transaction's start, on this
	// machine's clock.
	var processed, other int
	var first time.Time
	if err := pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE status = 'processed'), count(*) FILTER (WHERE status <> 'processed'),
			coalesce(min(received_at), now())
		FROM inbox WHERE source = $1 AND received_at >= $2`, source, start).Scan(&processed, &other, &first); err != nil {
		return daemonRun{}, err
	}
	if processed != n || other != 0 {
		return daemonRun{}, fmt.Errorf("%d processed and %d other rows of %s, want %d processed:\n%s", processed, other, source, n, d.stderr.String())
	}
	m.startup = first.Sub(start)
	return m, nil
}

// cpuMeter measures the CPU time this process and a database's backends
// use.
type cpuMeter struct {
	pool    *pgxpool.Pool
	db      *database
	start   time.Time
	self    float64
	backend map[int]float64
	// broker is the command name of the broker's server process on this
	// machine (beam.smp, nats-server), whose CPU time is measured too when
	// set; brokerStart is its CPU time at the start.
	broker      string
	brokerStart float64
}

// measureBroker adds the CPU time of the server processes called comm
// (/proc/<pid>/comm) to what m measures.
func (m *cpuMeter) measureBroker(comm string) {
	m.broker, m.brokerStart = comm, processCPU(comm)
}

func startCPUMeter(ctx context.Context, pool *pgxpool.Pool, db *database) (*cpuMeter, error) {
	b, err := backendsCPU(ctx, pool, db.name)
	if err != nil {
		return nil, err
	}
	return &cpuMeter{pool: pool, db: db, start: time.Now(), self: selfCPU(), backend: b}, nil
}

// stop returns what was used since start. Call it before the measured
// connections close: a backend that is gone is not counted.
func (m *cpuMeter) stop(ctx context.Context) (*CPUUse, error) {
	self := selfCPU() - m.self
	after, err := backendsCPU(ctx, m.pool, m.db.name)
	if err != nil {
		return nil, err
	}
	var pg float64
	for pid, t := range after {
		pg += t - m.backend[pid]
	}
	u := &CPUUse{Process: self, Postgres: pg, Wall: time.Since(m.start).Seconds()}
	if m.broker != "" {
		u.Broker = processCPU(m.broker) - m.brokerStart
	}
	return u, nil
}

// processCPU is the CPU time (user and system, seconds) of the processes of
// this machine whose command name is comm, from /proc; 0 when there are
// none.
func processCPU(comm string) float64 {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var total float64
	for _, d := range dirs {
		c, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		if t, ok := statCPU(filepath.Join(d, "stat")); ok {
			total += t
		}
	}
	return total
}

// statCPU is the CPU time (user and system, seconds) in a /proc/<pid>/stat
// file.
func statCPU(path string) (float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false // not on this machine, or gone
	}
	// The fields after the command name (which may hold spaces) in
	// parentheses: utime and stime are the 12th and 13th of them.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / clockTicks, true
}

// selfCPU is the CPU time (user and system) this process has used, in
// seconds: the in-process daemon, kfake and the benchmark's polls.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on
// Linux).
const clockTicks = 100

// backendsCPU returns the CPU time (user and system, seconds) of each
// PostgreSQL backend connected to database name, from /proc: the server runs
// on this machine. Background processes (WAL writer, checkpointer,
// autovacuum) are not counted.
func backendsCPU(ctx context.Context, pool *pgxpool.Pool, name string) (map[int]float64, error) {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, name)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := make(map[int]float64, len(pids))
	for _, pid := range pids {
		if t, ok := statCPU(fmt.Sprintf("/proc/%d/stat", pid)); ok {
			out[int(pid)] = t
		}
	}
	return out, nil
}

// retain fills the inbox with m processed rows of the topic, a day old, with
// random-looking event ids as real ones (UUIDs) are, in one statement, then
// vacuums and analyzes the table as autovacuum eventually would (as
// BenchmarkEndToEndRetained does).
func retain(ctx context.Context, pool *pgxpool.Pool, m int) error {
	if _, err := pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, key, payload, status,
			attempts, kafka_topic, kafka_partition, kafka_offset, received_at, available_at, processed_at, updated_at)
		SELECT $1, md5(g::text), $4, convert_to('key-' || g, 'UTF8'), $2::bytea, 'processed',
			1, $1, g % 4, g / 4, now() - interval '1 day', now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'
		FROM generate_series(1, $3::int) AS g`, topic, benchPayload, m, eventType); err != nil {
		return fmt.Errorf("insert retained rows: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE inbox`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return nil
}

// startProfiles starts the CPU, blocking and mutex profiles that p names,
// and returns the function that stops them and writes them.
func startProfiles(p profiles) (func() error, error) {
	var cpuFile *os.File
	if p.cpu != "" {
		f, err := os.Create(p.cpu)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		cpuFile = f
	}
	if p.block != "" {
		// One blocking event sampled per 10 µs blocked: enough to rank the
		// waits, cheap enough not to change them much.
		runtime.SetBlockProfileRate(10_000)
	}
	if p.mutex != "" {
		runtime.SetMutexProfileFraction(10)
	}
	return func() error {
		var errs []error
		if cpuFile != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpuFile.Close())
		}
		for _, w := range []struct{ path, name string }{{p.block, "block"}, {p.mutex, "mutex"}} {
			if w.path == "" {
				continue
			}
			f, err := os.Create(w.path)
			if err == nil {
				err = pprof.Lookup(w.name).WriteTo(f, 0)
				errs = append(errs, f.Close())
			}
			errs = append(errs, err)
		}
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
		return errors.Join(errs...)
	}, nil
}

// humanCount is 2M, 500k or 1,234.
func humanCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

// filledKafka starts a cluster whose topic holds n events of benchPayload
// (ids ev-0 … ev-(n-1)) and writes the routes file the daemon runs with; it
// returns the cluster, the last id of each partition, the routes file, and
// what releases them.
func filledKafka(ctx context.Context, n int) (k *kafka, lastIDs []string, routes string, cleanup func(), err error) {
	k, err = newKafka(0, 5*time.Millisecond)
	if err != nil {
		return nil, nil, "", nil, err
	}
	lastIDs, err = k.fill(ctx, "ev-", n, func(int) []byte { return benchPayload })
	if err != nil {
		k.close()
		return nil, nil, "", nil, err
	}
	dir, err := os.MkdirTemp("", "inboxd-bench-")
	if err != nil {
		k.close()
		return nil, nil, "", nil, err
	}
	routes, err = routesFile(dir)
	if err != nil {
		k.close()
		_ = os.RemoveAll(dir)
		return nil, nil, "", nil, err
	}
	return k, lastIDs, routes, func() { k.close(); _ = os.RemoveAll(dir) }, nil
}
