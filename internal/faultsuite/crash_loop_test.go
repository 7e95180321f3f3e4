package faultsuite

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// exitHandlerKilled is the embedder's exit status when the handler of
// FAULT_EXIT_EVENT ended the process (embedder.ExitHandlerKilled).
const exitHandlerKilled = 3

// Scenario: a handler kills the process. The embedder's handler calls
// os.Exit on one row (as a Go fatal error, an OOM kill or a log.Fatal in a
// library would end it), a supervisor restarts the daemon after every exit,
// rows stream in by SQL, INBOXD_MAX_ATTEMPTS=3. The crash-looping row must
// cost its own attempts and go dead within 3 crashes; every other row is
// processed, nothing is lost, and external duplicates stay within the
// crashes' bound. (Before, the database learnt of a queued row's start only
// at the next renewal tick, the rescuer refunded the attempt of a row that
// crashed at once, and the row went dead only after 10 process exits.)
func TestHandlerKillsTheProcess(t *testing.T) {
	scenario(t, light)
	db := sharedDB(t)
	sink := NewSink(t)
	lease := 2 * time.Second
	run := NewRun(t, db.Pool, sink, lease)
	runs := runsFile(t)
	const workers, maxAttempts = 4, 3
	env := append(baseEnv(db.URL, lease, workers, fmt.Sprintf("INBOXD_MAX_ATTEMPTS=%d", maxAttempts)),
		embedderEnv(sink, runs, "FAULT_EXIT_EVENT=poison")...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	d := StartDaemon(t, DaemonSpec{Name: "gen-0", Binary: bins.Embedder, Env: env})
	obs := observe(ctx, d, nil)
	n, rate := pick(3000, 12000), 300
	prod := InsertStream(ctx, db.Pool, "sql", Stream{N: n, Prefix: "s-", Rate: rate})
	WaitFor(t, scale(30*time.Second), "a tenth of the stream inserted", func() bool { return prod.Count() >= n/10 })
	if err := InsertEvents(ctx, db.Pool, "poison-src", []Event{{ID: "poison", Type: "http.effect"}}); err != nil {
		t.Fatal(err)
	}

	poisonDead := func() bool {
		var status string
		err := db.Pool.QueryRow(ctx, `SELECT status FROM inbox WHERE event_id = 'poison'`).Scan(&status)
		return err == nil && status == "dead"
	}
	crashes := 0
	restarted := time.Now()
	deadline := time.Now().Add(scale(120 * time.Second))
	for !poisonDead() {
		if time.Now().After(deadline) {
			t.Fatalf("the poison row is not dead after %d crashes and %s", crashes, scale(120*time.Second))
		}
		select {
		case <-d.Done():
			if code := d.ExitCode(); code != exitHandlerKilled {
				t.Fatalf("%s exited with %d (%s), want %d (the handler's os.Exit)", d.Name, code, d.ExitDescription(), exitHandlerKilled)
			}
			crashes++
			run.Ledger.Record("handler os.Exit", obs.fault(workers))
			if crashes > maxAttempts+1 {
				t.Fatalf("CRASH LOOP: %d crashes and the poison row is not dead (max attempts %d)", crashes, maxAttempts)
			}
			// A supervisor restarts it at once; it may crash again before
			// it is ready.
			d = StartDaemon(t, DaemonSpec{Name: fmt.Sprintf("gen-%d", crashes), Binary: bins.Embedder, Env: env, NoWait: true})
			obs = observe(ctx, d, obs)
			restarted = time.Now()
		case <-time.After(100 * time.Millisecond):
		}
	}
	run.Note("crashes=%d", crashes)
	if crashes > maxAttempts {
		t.Errorf("CRASH LOOP: the poison row went dead after %d crashes, want at most %d (its max attempts)", crashes, maxAttempts)
	}
	var attempts int
	var lastError string
	if err := db.Pool.QueryRow(ctx, `SELECT attempts, coalesce(last_error, '') FROM inbox WHERE event_id = 'poison'`).
		Scan(&attempts, &lastError); err != nil {
		t.Fatal(err)
	}
	run.Note("poison=dead/%d", attempts)

	prod.Wait(t, scale(60*time.Second))
	if err := prod.Err(); err != nil {
		t.Fatalf("producer: %v", err)
	}
	run.Expect("sql", prod.Acked()...)
	run.WaitProcessed(scale(60 * time.Second))
	CheckLeasesRecovered(t, db.Pool, restarted, lease)
	run.Check()
	var dead int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE status = 'dead' AND event_id <> 'poison'`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead > 0 {
		t.Errorf("INNOCENT DEAD: %d rows besides the poison one went dead", dead)
	}
}

// observer keeps the highest processed rate and outcome-write window (p99)
// a daemon showed, scraped every quarter second: a crash the test does not
// inject cannot be observed right before it, so the ledger records these.
type observer struct {
	mu     sync.Mutex
	rate   float64
	window time.Duration
}

// observe scrapes d until it exits or ctx ends, starting from what prev
// (the daemon it replaces, or nil) showed: a restarted daemon may crash
// before its first scrape.
func observe(ctx context.Context, d *Daemon, prev *observer) *observer {
	o := &observer{window: FallbackWindow}
	if prev != nil {
		f := prev.fault(0)
		o.rate, o.window = f.Rate, f.Window
	}
	go func() {
		var last float64
		var lastAt time.Time
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.Done():
				return
			case <-t.C:
			}
			m, err := d.Metrics()
			if err != nil {
				continue
			}
			now := time.Now()
			processed := m.Value("inboxd_worker_completed_total", "outcome", "processed")
			o.mu.Lock()
			if !lastAt.IsZero() {
				o.rate = max(o.rate, (processed-last)/now.Sub(lastAt).Seconds())
			}
			if q, ok := m.Quantile(WriteDelayMetric, 0.99); ok {
				o.window = max(o.window, time.Duration(q*float64(time.Second)))
			}
			o.mu.Unlock()
			last, lastAt = processed, now
		}
	}()
	return o
}

// fault is the ledger entry of a crash of the observed daemon.
func (o *observer) fault(inflight int) Fault {
	o.mu.Lock()
	defer o.mu.Unlock()
	return Fault{InFlight: inflight, Rate: o.rate, Window: o.window}
}
