package faultsuite

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Scenario e (bug report): SIGKILL storms. 3,000 Kafka events to a sink that
// answers at once, INBOXD_WORKERS=2, three SIGKILLs with restarts. Nothing
// may be lost, and external duplicates must stay within the bound: per
// kill, the handlers in flight plus what finished in the last write window
// (reported: 90–134 duplicates per kill with 2 in flight, outcomes waiting
// in completion batches).
func TestSIGKILLStorm(t *testing.T) {
	scenario(t, heavy)
	db := sharedDB(t)
	sink := NewSink(t)
	lease := 2 * time.Second
	run := NewRun(t, db.Pool, sink, lease)
	run.Ledger.RateSpan = 500 * time.Millisecond // the whole stream takes seconds
	kafka := NewKafka(t, "orders", KafkaOptions{Partitions: 4})
	run.OnFailure(func() string { return kafka.DescribeGroup("storm") })
	run.OnFailure(func() string { return inboxByPartition(db.Pool) })
	const workers = 2
	routes := writeRoutes(t, httpRoute(sink, "http.effect"))
	env := append(baseEnv(db.URL, lease, workers, "INBOXD_ROUTES="+routes), kafka.DaemonEnv("storm")...)

	n := pick(3000, 30000)
	kills := pick(3, 12)
	d := StartDaemon(t, DaemonSpec{Name: "gen-0", Binary: bins.Inboxd, Env: env})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Paced, so the stream outlasts three kill-and-restart cycles (at full
	// speed the daemon drains 3,000 events in about a second).
	prod := kafka.Produce(ctx, Stream{N: n, Prefix: "k-", Rate: pick(500, 1000)})

	processed := func() int {
		var c int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE status = 'processed'`).Scan(&c)
		return c
	}
	var recovered time.Time
	for k := range kills {
		// Kill at evenly spaced points of the stream, while rows flow.
		target := (k + 1) * n / (kills + 2)
		WaitFor(t, scale(60*time.Second), fmt.Sprintf("%d rows processed before kill %d", target, k+1),
			func() bool { return processed() >= target })
		// ...and this process itself in full swing, a settled member of the
		// group. The first generation's ingest hands rows to its own
		// handlers too (the hand-off at ingest, on by default), so the
		// first kill hits handed-off rows in flight, which must come back
		// as claimed rows do (a later generation may find the stream all
		// ingested, its rows all claimed).
		WaitFor(t, scale(60*time.Second), fmt.Sprintf("%s processing before kill %d", d.Name, k+1), func() bool {
			m, err := d.Metrics()
			return err == nil && m.Value("inboxd_worker_completed_total", "outcome", "processed") >= 50 &&
				(k > 0 || m.Value("inboxd_worker_handed_off_rows_total") >= 20)
		})
		kafka.WaitGroupSettled(t, "storm", 1, 30*time.Second)
		f := run.Ledger.Observe(workers, d)
		d.Kill()
		run.Ledger.Record("SIGKILL", f)
		d = StartDaemon(t, DaemonSpec{Name: fmt.Sprintf("gen-%d", k+1), Binary: bins.Inboxd, Env: env})
		recovered = time.Now()
	}
	CheckLeasesRecovered(t, db.Pool, recovered, lease)
	prod.Wait(t, scale(120*time.Second))
	if err := prod.Err(); err != nil {
		t.Fatalf("producer: %v", err)
	}
	run.Expect("orders", prod.Acked()...)
	run.WaitProcessed(scale(60 * time.Second))
	run.Check()
	if run.Ledger.Count() > 0 {
		run.Note("dups_per_kill=%.1f", float64(sink.Duplicates())/float64(run.Ledger.Count()))
	}
	var rerun int
	_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE attempts > 1`).Scan(&rerun)
	run.Note("rows_attempted_twice=%d", rerun)
}

// inboxByPartition reports, for failure output, the rows and the highest
// Kafka offset stored per partition.
func inboxByPartition(db *pgxpool.Pool) string {
	rows, err := db.Query(context.Background(), `SELECT kafka_partition, count(*), max(kafka_offset)
		FROM inbox WHERE kafka_partition IS NOT NULL GROUP BY 1 ORDER BY 1`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var p, n int
		var maxOff int64
		if rows.Scan(&p, &n, &maxOff) == nil {
			parts = append(parts, fmt.Sprintf("p%d rows=%d max_offset=%d", p, n, maxOff))
		}
	}
	return "inbox by partition: " + strings.Join(parts, ", ")
}

// Scenario f: a zombie replica. Replica a is SIGSTOPped while it holds rows
// in flight, stays stopped past its lease while replica b runs (and
// rescues a's rows), then gets SIGCONT. Its late completions must be fenced:
// no transactional duplicate, nothing lost, and a's stale outcomes either
// counted in inboxd_worker_fenced_total or its rows re-run by b.
func TestZombieReplicaIsFenced(t *testing.T) {
	scenario(t, heavy)
	db := sharedDB(t)
	sink := NewSink(t)
	lease := 2 * time.Second
	run := NewRun(t, db.Pool, sink, lease)
	runs := runsFile(t)
	const workers = 8
	env := append(baseEnv(db.URL, lease, workers), embedderEnv(sink, runs, "FAULT_TX_SLEEP=100ms", "FAULT_HTTP_SLEEP=100ms")...)
	a := StartDaemon(t, DaemonSpec{Name: "a", Binary: bins.Embedder, Env: env})
	b := StartDaemon(t, DaemonSpec{Name: "b", Binary: bins.Embedder, Env: env})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prod := InsertStream(ctx, db.Pool, "sql", Stream{N: pick(800, 8000), Prefix: "z-", Type: mixedTypes, Rate: 100})

	// Measure a, then stop it the moment it holds rows.
	WaitFor(t, 30*time.Second, "both replicas processing", func() bool {
		var c int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT locked_by) FROM inbox WHERE status = 'processing'`).Scan(&c)
		return c == 2
	})
	f := run.Ledger.Observe(workers, a)
	WaitFor(t, 30*time.Second, "replica a with rows in flight", func() bool {
		var c int
		_ = db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM inbox WHERE status = 'processing' AND locked_by = $1`, a.WorkerID()).Scan(&c)
		return c >= workers/2
	})
	a.Pause()
	run.Ledger.Record("SIGSTOP", f)
	stoppedAt := time.Now()
	// b rescues a's rows once their leases expire.
	if !waitCond(30*time.Second, 100*time.Millisecond, func() bool {
		m, err := b.Metrics()
		return err == nil && m.Value("inboxd_worker_rescued_total") > 0
	}) {
		t.Errorf("ZOMBIE HOLDS ROWS: 30s after SIGSTOP (lease %s), replica b has rescued none of a's rows: %s; sessions idle in transaction: %s",
			lease, describeHeld(db.Pool, a.WorkerID()), idleInTransaction(db.Pool))
	}
	// Stay stopped a while past the lease, with b working meanwhile.
	if d := 2*lease + RescueInterval(lease) - time.Since(stoppedAt); d > 0 {
		time.Sleep(d)
	}
	a.Resume()
	resumedAt := time.Now()
	run.Note("stopped=%s", resumedAt.Sub(stoppedAt).Round(100*time.Millisecond))

	CheckLeasesRecovered(t, db.Pool, resumedAt, lease)
	prod.Wait(t, scale(120*time.Second))
	if err := prod.Err(); err != nil {
		t.Fatalf("inserter: %v", err)
	}
	run.Expect("sql", prod.Acked()...)
	run.WaitProcessed(scale(60 * time.Second))
	run.Check()

	// a's late work was fenced, or b re-ran a's rows.
	fenced := 0.0
	if m, err := a.Metrics(); err != nil {
		t.Errorf("scrape a after SIGCONT: %v", err)
	} else {
		fenced = m.Value("inboxd_worker_fenced_total")
	}
	reRun := 0
	if r, err := ReadRuns(runs); err != nil {
		t.Errorf("runs file: %v", err)
	} else {
		for _, invs := range r.ByEvent {
			if len(invs) > 1 && invs[0].PID == a.PID() && invs[len(invs)-1].PID == b.PID() {
				reRun++
			}
		}
	}
	run.Note("fenced_a=%.0f rerun_by_b=%d", fenced, reRun)
	if fenced == 0 && reRun == 0 {
		t.Errorf("ZOMBIE: replica a's rows were neither fenced (inboxd_worker_fenced_total = 0) nor re-run by b: the stop did not take rows from a")
	}
}

// describeHeld reports the rows a worker holds processing and how many of
// them have an expired lease.
func describeHeld(db *pgxpool.Pool, workerID string) string {
	var n, expired int
	err := db.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE lease_expires_at < now())
		FROM inbox WHERE status = 'processing' AND locked_by = $1`, workerID).Scan(&n, &expired)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s holds %d rows processing, %d with an expired lease", workerID, n, expired)
}

// idleInTransaction lists the sessions idle in a transaction for over a
// second: what a frozen process left open.
func idleInTransaction(db *pgxpool.Pool) string {
	rows, err := db.Query(context.Background(), `SELECT application_name, round(extract(epoch FROM now() - xact_start)::numeric, 1), left(query, 160)
		FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'
		AND xact_start < now() - interval '1 second' ORDER BY xact_start LIMIT 8`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var app, query string
		var age float64
		if rows.Scan(&app, &age, &query) == nil {
			parts = append(parts, fmt.Sprintf("[%s, open %.1fs, last statement %q]", app, age, strings.Join(strings.Fields(query), " ")))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Scenario g: three replicas sharing one consumer group and one database,
// churning: one after another is SIGKILLed and restarted while a Kafka
// stream of transactional and http events flows. 5% of the attempts fail
// with a retryable error (FAULT_FAIL_RATE), so retries with backoff are in
// flight when the kills land.
func TestChurningReplicas(t *testing.T) {
	scenario(t, alone)
	db := sharedDB(t)
	lease := 2 * time.Second
	m := newMixedStream(t, mixedConfig{DaemonURL: db.URL, Inspect: db.Pool, Lease: lease, Workers: 8,
		Events: pick(3000, 30000), Rate: pick(300, 500), Partitions: 6, Env: []string{"FAULT_FAIL_RATE=0.05"}})
	replicas := []*Daemon{m.start("r0"), m.start("r1"), m.start("r2")}
	m.produce(pick(300, 500))
	m.waitUnderWay()

	kills := pick(6, 30)
	var recovered time.Time
	for k := range kills {
		i := k % len(replicas)
		m.kafka.WaitGroupSettled(t, "faults", len(replicas), 30*time.Second)
		f := m.run.Ledger.Observe(m.workers, replicas[i])
		replicas[i].Kill()
		m.run.Ledger.Record("SIGKILL", f)
		replicas[i] = m.start(fmt.Sprintf("r%d-gen%d", i, k/len(replicas)+1))
		recovered = time.Now()
		time.Sleep(500 * time.Millisecond)
	}
	m.finish(recovered, scale(90*time.Second))
}

// Scenario h: big payloads. 700 messages of 1 MiB (INBOXD_MAX_PAYLOAD's
// default, so stored, not rejected) through Kafka to a sink that takes
// 500 ms per request, so the inbox backs up and the pool is full: the
// daemon's peak RSS (VmHWM) must stay under 512 MiB. The daemon is built
// without -race here: the race detector multiplies memory.
func TestBigPayloadsBoundedMemory(t *testing.T) {
	scenario(t, alone)
	payloadRSS(t, pick(700, 2800), 1<<20, 512<<20, 500*time.Millisecond)
}

// Scenario h: 1 KiB payloads produced at full rate to a sink that answers
// at once: peak RSS under 200 MB.
func TestSmallPayloadsAtFullRateBoundedMemory(t *testing.T) {
	scenario(t, alone)
	payloadRSS(t, pick(30000, 200000), 1<<10, 200_000_000, 0)
}

func payloadRSS(t *testing.T, n, size int, limit int64, sinkDelay time.Duration) {
	db := sharedDB(t)
	sink := NewSink(t)
	sink.SetDelay(sinkDelay)
	lease := 30 * time.Second
	run := NewRun(t, db.Pool, sink, lease)
	maxMsg := 0
	if size >= 1<<20 {
		maxMsg = 4 << 20
	}
	kafka := NewKafka(t, "blobs", KafkaOptions{Partitions: 4, MaxMessageBytes: maxMsg})
	routes := writeRoutes(t, httpRoute(sink, "blob"))
	env := append(baseEnv(db.URL, lease, 64, "INBOXD_ROUTES="+routes), kafka.DaemonEnv("blobs")...)
	d := StartDaemon(t, DaemonSpec{Name: "a", Binary: bins.InboxdNoRace, Env: env})

	// Incompressible payloads: one random block, each message stamped with
	// its index.
	block := make([]byte, size)
	if f, err := os.Open("/dev/urandom"); err == nil {
		_, _ = f.Read(block)
		f.Close()
	}
	payload := func(i int) []byte {
		p := make([]byte, size)
		copy(p, block)
		copy(p, strconv.Itoa(i))
		return p
	}
	batch := 0
	if size >= 1<<20 {
		batch = 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prod := kafka.Produce(ctx, Stream{N: n, Prefix: "b-", Type: func(int) string { return "blob" }, Payload: payload, Batch: batch})

	// Sample the peak while the stream flows (VmHWM only grows; reading it
	// at the end is enough, but a dying process takes it along).
	var peak int64
	sample := func() {
		if v, err := d.PeakRSS(); err == nil {
			peak = max(peak, v)
		}
	}
	WaitFor(t, scale(5*time.Minute), "producer finished", func() bool {
		sample()
		select {
		case <-prod.Done():
			return true
		default:
			return !d.Running()
		}
	})
	if err := prod.Err(); err != nil {
		t.Fatalf("producer: %v", err)
	}
	run.Expect("blobs", prod.Acked()...)
	run.WaitProcessed(scale(3 * time.Minute))
	sample()
	if !d.Running() {
		t.Errorf("the daemon died: %s", d.ExitDescription())
	}
	run.Check()
	run.Note("payload=%dB sink_delay=%s peak_rss=%dMiB limit=%dMiB sink_bytes=%dMiB", size, sinkDelay, peak>>20, limit>>20, sink.Bytes()>>20)
	if peak > limit {
		t.Errorf("MEMORY: peak RSS %d MiB with %d-byte payloads, limit %d MiB", peak>>20, size, limit>>20)
	}
	var rejected int
	var reason string
	_ = db.Pool.QueryRow(context.Background(), `SELECT count(*), coalesce(min(last_error), '') FROM inbox WHERE status = 'rejected'`).Scan(&rejected, &reason)
	if rejected > 0 {
		t.Errorf("%d messages rejected, e.g. %q", rejected, reason)
	}
}
