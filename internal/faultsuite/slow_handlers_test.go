package faultsuite

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// embedderEnv configures the embedder's Go handlers.
func embedderEnv(sink *Sink, runs string, extra ...string) []string {
	env := []string{"FAULT_RUNS_FILE=" + runs}
	if sink != nil {
		env = append(env, "FAULT_SINK_URL="+sink.URL())
	}
	return append(env, extra...)
}

// checkRuns fails t when a row's handler ran maxRuns times or more, and
// notes the largest count in the summary.
func checkRuns(t *testing.T, run *Run, path string, maxRuns int) {
	t.Helper()
	runs, err := ReadRuns(path)
	if err != nil {
		t.Errorf("runs file: %v", err)
		return
	}
	n, id := runs.MaxRuns()
	run.Note("max_runs_per_row=%d", n)
	if n >= maxRuns {
		t.Errorf("HANDLER RE-RUN: %s's handler ran %d times (attempts %v): leases are lost while handlers run",
			id, n, runs.ByEvent[id])
	}
}

// txTimeout bounds the wait for rows whose transactional handlers each
// hold their transaction for sleep. No throughput is asserted, but the rows
// must not take longer than with max(2, workers/4) handlers at a time (the
// connections the default pool sizing gives transactional handlers), with
// 50% to spare, plus 30s.
func txTimeout(rows int, sleep time.Duration, workers int) time.Duration {
	conc := max(2, workers/4)
	return time.Duration(rows)*sleep*3/time.Duration(2*conc) + 30*time.Second
}

// checkNoDead fails t when any row is dead.
func checkNoDead(t *testing.T, run *Run) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	var example string
	if err := run.DB.QueryRow(ctx, `SELECT count(*), coalesce(min(event_id || ': ' || coalesce(last_error, '')), '') FROM inbox WHERE status = 'dead'`).Scan(&n, &example); err != nil {
		t.Errorf("count dead: %v", err)
		return
	}
	run.Note("dead=%d", n)
	if n > 0 {
		t.Errorf("DEAD: %d rows dead-lettered, e.g. %s", n, example)
	}
}

// slowTx is scenario a: slow transactional handlers mixed with plain http
// handlers, with no fault at all. Every row must be processed once: none
// dead, no duplicate effect, no handler run maxRuns times.
func slowTx(t *testing.T, lease, sleep time.Duration, txRows, httpRows int) {
	db := sharedDB(t)
	sink := NewSink(t)
	run := NewRun(t, db.Pool, sink, lease)
	ctx := context.Background()
	runs := runsFile(t)

	const workers = 4
	env := append(baseEnv(db.URL, lease, workers, "INBOXD_MAX_ATTEMPTS=3"),
		embedderEnv(sink, runs, "FAULT_TX_SLEEP="+sleep.String())...)
	StartDaemon(t, DaemonSpec{Name: "a", Binary: bins.Embedder, Env: env})

	var evs []Event
	var ids []string
	for i := range txRows + httpRows {
		typ := "tx.effect"
		// Spread the http rows among the tx rows.
		if httpRows > 0 && i%((txRows+httpRows)/httpRows) == 0 {
			typ = "http.effect"
		}
		id := fmt.Sprintf("%s-%04d", typ, i)
		ids = append(ids, id)
		evs = append(evs, Event{ID: id, Type: typ})
	}
	if err := InsertEvents(ctx, db.Pool, "sql", evs); err != nil {
		t.Fatal(err)
	}
	run.Expect("sql", ids...)
	run.WaitProcessed(txTimeout(txRows, sleep, workers))
	CheckLeasesRecovered(t, db.Pool, time.Now(), lease)
	run.Check()
	checkNoDead(t, run)
	checkRuns(t, run, runs, 3)
}

// Scenario a (bug report): lease 2s, 4 workers, INBOXD_MAX_ATTEMPTS=3,
// 120 transactional rows each spending 1s in its transaction, mixed with
// plain http rows. Expected: all processed, none dead, no duplicate
// effect, no handler run 3 times for one row.
func TestSlowTxHandlersLease2s(t *testing.T) {
	scenario(t, light)
	slowTx(t, 2*time.Second, time.Second, pick(120, 480), pick(40, 160))
}

// Scenario a, second shape: lease 6s with handlers spending 2.5s in their
// transaction.
func TestSlowTxHandlersLease6s(t *testing.T) {
	scenario(t, light)
	slowTx(t, 6*time.Second, 2500*time.Millisecond, pick(40, 160), pick(16, 64))
}

// Scenario b: 64 transactional handlers sleeping 3s in their transactions
// (INBOXD_WORKERS=64, the default pool size) must not starve the engine:
// /readyz keeps answering within 2s, ingest keeps inserting Kafka events of
// another type, and no lease is lost.
func TestSlowTxHandlersDoNotStarveEngine(t *testing.T) {
	scenario(t, light)
	db := sharedDB(t)
	sink := NewSink(t)
	lease := 10 * time.Second
	run := NewRun(t, db.Pool, sink, lease)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runs := runsFile(t)
	kafka := NewKafka(t, "probes", KafkaOptions{Partitions: 2})

	const workers = 64
	const sleep = 3 * time.Second
	routes := writeRoutes(t, "routes:\n  - type: probe\n    handler: ignore\n")
	env := append(append(baseEnv(db.URL, lease, workers, "INBOXD_ROUTES="+routes),
		embedderEnv(sink, runs, "FAULT_TX_SLEEP="+sleep.String())...), kafka.DaemonEnv("probes")...)
	d := StartDaemon(t, DaemonSpec{Name: "a", Binary: bins.Embedder, Env: env})

	// Kafka is flowing before the slow rows arrive.
	probes := kafka.Produce(ctx, Stream{N: 1 << 30, Prefix: "probe-", Type: func(int) string { return "probe" }, Rate: 20, Batch: 1})
	WaitFor(t, 30*time.Second, "first probes ingested", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE event_type = 'probe'`).Scan(&n)
		return n >= 10
	})

	txRows := pick(256, 1024) // 4 (16) rounds of 64 handlers
	var evs []Event
	var ids []string
	for i := range txRows {
		id := fmt.Sprintf("slow-%04d", i)
		ids = append(ids, id)
		evs = append(evs, Event{ID: id, Type: "tx.effect"})
	}
	phaseStart := time.Now()
	if err := InsertEvents(ctx, db.Pool, "sql", evs); err != nil {
		t.Fatal(err)
	}
	run.Expect("sql", ids...)

	// /readyz, polled all along the slow phase, must answer 200 within 2s.
	var probeMu sync.Mutex
	var readyFailures []string
	readyChecks := 0
	stopReady := make(chan struct{})
	readyDone := make(chan struct{})
	go func() {
		defer close(readyDone)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopReady:
				return
			case <-tick.C:
			}
			start := time.Now()
			code, err := d.Readyz(2 * time.Second)
			probeMu.Lock()
			readyChecks++
			if err != nil || code != http.StatusOK {
				readyFailures = append(readyFailures, fmt.Sprintf("%s: code %d err %v after %s",
					start.Sub(phaseStart).Round(time.Millisecond), code, err, time.Since(start).Round(time.Millisecond)))
			}
			probeMu.Unlock()
		}
	}()

	run.WaitProcessed(txTimeout(txRows, sleep, workers))
	phaseEnd := time.Now()
	close(stopReady)
	<-readyDone
	cancel()
	<-probes.Done()

	// Ingest kept inserting: every probe acknowledged during the slow phase
	// reached the inbox within 5s of its acknowledgement. (The last ones
	// may still be on their way: give each its 5s before looking.)
	const ingestBound = 5 * time.Second
	var phaseProbes []string
	for _, id := range probes.Acked() {
		if ackAt, _ := probes.AckedAt(id); !ackAt.Before(phaseStart) && !ackAt.After(phaseEnd) {
			phaseProbes = append(phaseProbes, id)
		}
	}
	waitCond(time.Until(phaseEnd.Add(ingestBound)), 100*time.Millisecond, func() bool {
		var n int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE source = 'probes' AND event_id = ANY($1)`, phaseProbes).Scan(&n)
		return n == len(phaseProbes)
	})
	var worst time.Duration
	var worstID string
	late, missing, inPhase := 0, 0, 0
	for _, id := range probes.Acked() {
		ackAt, _ := probes.AckedAt(id)
		if ackAt.Before(phaseStart) || ackAt.After(phaseEnd) {
			continue
		}
		inPhase++
		var receivedAt time.Time
		err := db.Pool.QueryRow(context.Background(), `SELECT received_at FROM inbox WHERE source = 'probes' AND event_id = $1`, id).Scan(&receivedAt)
		if err != nil {
			missing++
			continue
		}
		lag := receivedAt.Sub(ackAt)
		if lag > worst {
			worst, worstID = lag, id
		}
		if lag > ingestBound {
			late++
		}
	}
	run.Note("probes=%d probe_lag_max=%s", inPhase, worst.Round(time.Millisecond))
	if late > 0 || missing > 0 {
		t.Errorf("INGEST STARVED: of %d probes acknowledged during the slow phase, %d reached the inbox more than %s after their acknowledgement and %d not at all (worst %s: %s)",
			inPhase, late, ingestBound, missing, worstID, worst.Round(time.Millisecond))
	}
	probeMu.Lock()
	run.Note("readyz_checks=%d readyz_failures=%d", readyChecks, len(readyFailures))
	if len(readyFailures) > 0 {
		t.Errorf("READYZ: %d of %d /readyz checks during the slow phase failed or took over 2s, e.g. %v",
			len(readyFailures), readyChecks, readyFailures[:min(5, len(readyFailures))])
	}
	probeMu.Unlock()

	if m, err := d.Metrics(); err != nil {
		t.Errorf("scrape: %v", err)
	} else {
		lost := m.Value("inboxd_worker_lease_lost_total")
		rescued := m.Value("inboxd_worker_rescued_total")
		run.Note("lease_lost=%.0f rescued=%.0f", lost, rescued)
		if lost > 0 || rescued > 0 {
			t.Errorf("LEASES LOST: inboxd_worker_lease_lost_total = %.0f, inboxd_worker_rescued_total = %.0f, want 0", lost, rescued)
		}
	}
	CheckLeasesRecovered(t, db.Pool, time.Now(), lease)
	run.Check()
	checkNoDead(t, run)
	checkRuns(t, run, runs, 2)
}
