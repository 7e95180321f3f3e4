package faultsuite

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WriteDelayMetric is the histogram of how long a handler's outcome waits
// before it is written (the window in which a killed process loses
// finished work). When a daemon does not export it, FallbackWindow is used.
const WriteDelayMetric = "inboxd_worker_outcome_write_delay_seconds"

// FallbackWindow is the write window assumed when WriteDelayMetric is
// absent.
const FallbackWindow = 100 * time.Millisecond

// recoverySlack is added to lease + rescue interval in CheckLeasesRecovered:
// the rescue statement itself and the poll take a moment.
const recoverySlack = 500 * time.Millisecond

// RescueInterval is the worker's default rescue period for a lease
// (worker.Config.RescueInterval: lease/2, between 1s and 30s).
func RescueInterval(lease time.Duration) time.Duration {
	return min(max(lease/2, time.Second), 30*time.Second)
}

// Fault is one injected fault and what it may cost in external
// duplicates: every handler in flight, plus the outcomes finished but not
// yet written (rate × window).
type Fault struct {
	// Kind names the fault ("SIGKILL", "restart fast", …).
	Kind string
	// At is when it was injected.
	At time.Time
	// InFlight is the configured INBOXD_WORKERS of the affected processes.
	InFlight int
	// Rate is the observed processed rows per second of the affected
	// processes just before the fault.
	Rate float64
	// Window is the p99 of WriteDelayMetric before the fault (or
	// FallbackWindow).
	Window time.Duration
	// Fallback reports that Window is FallbackWindow because the histogram
	// was absent.
	Fallback bool
}

// Cost is the number of external duplicates the fault may cause:
// InFlight + Rate × Window, the second term rounded up to whole rows (an
// estimate of 1.9 unwritten outcomes may be 2 rows; a zombie scenario once
// saw 10 duplicates against 8 + 1.9).
func (f Fault) Cost() float64 { return float64(f.InFlight) + math.Ceil(f.Rate*f.Window.Seconds()) }

// Ledger records a scenario's faults.
type Ledger struct {
	// RateSpan is how long Observe measures the processed rate (default
	// 1s; shorter for fast streams, so the fault still lands mid-stream).
	RateSpan time.Duration

	t      testing.TB
	mu     sync.Mutex
	faults []Fault
	warned bool
}

// NewLedger returns an empty ledger for t.
func NewLedger(t testing.TB) *Ledger { return &Ledger{t: t} }

// Observe measures the daemons about to suffer a fault: it scrapes each
// twice, RateSpan apart, for its processed rate and the p99 of
// WriteDelayMetric. Call it right before the fault and pass the result to
// Record. inflight is each daemon's INBOXD_WORKERS. A daemon that cannot be
// scraped counts with rate 0 and the fallback window (logged).
func (l *Ledger) Observe(inflight int, daemons ...*Daemon) Fault {
	rateSpan := l.RateSpan
	if rateSpan <= 0 {
		rateSpan = time.Second
	}
	f := Fault{InFlight: inflight * len(daemons)}
	type obs struct {
		rate     float64
		window   time.Duration
		fallback bool
		err      error
	}
	res := make([]obs, len(daemons))
	var wg sync.WaitGroup
	for i, d := range daemons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m1, err := d.Metrics()
			t1 := time.Now()
			if err != nil {
				res[i] = obs{err: err, window: FallbackWindow, fallback: true}
				return
			}
			time.Sleep(rateSpan)
			m2, err := d.Metrics()
			t2 := time.Now()
			if err != nil {
				res[i] = obs{err: err, window: FallbackWindow, fallback: true}
				return
			}
			o := obs{}
			processed := func(m Metrics) float64 {
				return m.Value("inboxd_worker_completed_total", "outcome", "processed")
			}
			o.rate = (processed(m2) - processed(m1)) / t2.Sub(t1).Seconds()
			if m2.Has(WriteDelayMetric) {
				q, ok := m2.Quantile(WriteDelayMetric, 0.99)
				if ok {
					o.window = time.Duration(q * float64(time.Second))
				}
			} else {
				o.window, o.fallback = FallbackWindow, true
			}
			res[i] = o
		}()
	}
	wg.Wait()
	for i, o := range res {
		if o.err != nil {
			l.t.Logf("ledger: cannot scrape %s before the fault (%v): rate 0, window %s", daemons[i].Label(), o.err, FallbackWindow)
		}
		f.Rate += o.rate
		// One window for the fault: the widest of the daemons'.
		f.Window = max(f.Window, o.window)
		f.Fallback = f.Fallback || o.fallback
	}
	if f.Fallback {
		l.mu.Lock()
		if !l.warned {
			l.warned = true
			l.t.Logf("ledger: %s not exported: assuming a write window of %s", WriteDelayMetric, FallbackWindow)
		}
		l.mu.Unlock()
	}
	return f
}

// Record adds a fault of kind, with the measurement from Observe, at the
// current time.
func (l *Ledger) Record(kind string, f Fault) {
	f.Kind, f.At = kind, time.Now()
	l.mu.Lock()
	l.faults = append(l.faults, f)
	l.mu.Unlock()
	l.t.Logf("fault %d: %s (in-flight %d, rate %.0f/s, window %s → may cost %.1f duplicates)",
		l.Count(), kind, f.InFlight, f.Rate, f.Window, f.Cost())
}

// Count is the number of faults recorded.
func (l *Ledger) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.faults)
}

// Bound is the external-duplicate bound: the sum of every fault's Cost.
func (l *Ledger) Bound() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b float64
	for _, f := range l.faults {
		b += f.Cost()
	}
	return b
}

// Kinds summarises the faults ("3×SIGKILL").
func (l *Ledger) Kinds() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	counts := map[string]int{}
	var order []string
	for _, f := range l.faults {
		if counts[f.Kind] == 0 {
			order = append(order, f.Kind)
		}
		counts[f.Kind]++
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%d×%s", counts[k], k))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// CheckLost counts the events of source among ids that are not processed
// (missing rows included) and fails t when there are any, listing a few.
func CheckLost(t testing.TB, db *pgxpool.Pool, source string, ids []string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := db.Query(ctx,
		`SELECT e.id, coalesce(i.status, 'missing'), coalesce(i.attempts, 0), coalesce(i.last_error, '')
		 FROM unnest($2::text[]) AS e(id)
		 LEFT JOIN inbox i ON i.source = $1 AND i.event_id = e.id
		 WHERE i.status IS DISTINCT FROM 'processed'
		 ORDER BY e.id`, source, ids)
	if err != nil {
		t.Errorf("check lost: %v", err)
		return -1
	}
	defer rows.Close()
	lost := 0
	var examples []string
	byStatus := map[string]int{}
	for rows.Next() {
		var id, status, lastErr string
		var attempts int
		if err := rows.Scan(&id, &status, &attempts, &lastErr); err != nil {
			t.Errorf("check lost: %v", err)
			return -1
		}
		lost++
		byStatus[status]++
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf("  %s: %s after %d attempts, last_error %q", id, status, attempts, lastErr))
		}
	}
	if err := rows.Err(); err != nil {
		t.Errorf("check lost: %v", err)
		return -1
	}
	if lost > 0 {
		t.Errorf("LOST: %d of %d acknowledged events of %s are not processed (by status: %v); e.g.\n%s",
			lost, len(ids), source, byStatus, strings.Join(examples, "\n"))
	}
	return lost
}

// CheckTxDuplicates counts the event ids with more than one row in the
// effects table (the transactional handler's writes) and fails t when
// there are any. A database without the table has none.
func CheckTxDuplicates(t testing.TB, db *pgxpool.Pool) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('effects') IS NOT NULL`).Scan(&exists); err != nil {
		t.Errorf("check tx duplicates: %v", err)
		return -1
	}
	if !exists {
		return 0
	}
	rows, err := db.Query(ctx,
		`SELECT event_id, count(*), string_agg(attempt || '@' || pid, ',' ORDER BY at)
		 FROM effects GROUP BY 1 HAVING count(*) > 1 ORDER BY 1`)
	if err != nil {
		t.Errorf("check tx duplicates: %v", err)
		return -1
	}
	defer rows.Close()
	dups := 0
	var examples []string
	for rows.Next() {
		var id, runs string
		var n int
		if err := rows.Scan(&id, &n, &runs); err != nil {
			t.Errorf("check tx duplicates: %v", err)
			return -1
		}
		dups++
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf("  %s: %d effects (attempt@pid: %s)", id, n, runs))
		}
	}
	if err := rows.Err(); err != nil {
		t.Errorf("check tx duplicates: %v", err)
		return -1
	}
	if dups > 0 {
		t.Errorf("TX DUPLICATES: %d events have more than one committed transactional effect; e.g.\n%s",
			dups, strings.Join(examples, "\n"))
	}
	return dups
}

// CheckExternalDuplicates compares the sink's duplicate 2xx deliveries with
// the ledger's bound and fails t when they exceed it.
func CheckExternalDuplicates(t testing.TB, sink *Sink, ledger *Ledger) (dups int, bound float64) {
	t.Helper()
	dups, bound = sink.Duplicates(), ledger.Bound()
	if float64(dups) > bound {
		var ex []string
		for k, n := range sink.DuplicateKeys(8) {
			ex = append(ex, fmt.Sprintf("%s×%d", k, n))
		}
		sort.Strings(ex)
		t.Errorf("EXTERNAL DUPLICATES: %d 2xx deliveries beyond the first, bound %.1f for %d faults (%s); e.g. %s",
			dups, bound, ledger.Count(), ledger.Kinds(), strings.Join(ex, " "))
	}
	return dups, bound
}

// CheckLeasesRecovered polls, from now until since + lease + rescue
// interval (+ a small slack), for the moment when no row is processing with
// an expired lease; since is when the last fault ended. It fails t if that
// moment does not come, listing the stuck rows.
func CheckLeasesRecovered(t testing.TB, db *pgxpool.Pool, since time.Time, lease time.Duration) bool {
	t.Helper()
	deadline := since.Add(lease + RescueInterval(lease) + recoverySlack)
	query := `SELECT count(*) FROM inbox WHERE status = 'processing' AND lease_expires_at < now()`
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var n int
		err := db.QueryRow(ctx, query).Scan(&n)
		cancel()
		if err == nil && n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			var detail string
			if err != nil {
				detail = err.Error()
			} else {
				detail = describeStuck(db)
			}
			t.Errorf("LEASES NOT RECOVERED: %s after the last fault (lease %s + rescue interval %s), %d rows are still processing with an expired lease: %s",
				time.Since(since).Round(time.Millisecond), lease, RescueInterval(lease), n, detail)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func describeStuck(db *pgxpool.Pool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := db.Query(ctx, `SELECT event_id, attempts, coalesce(locked_by, ''), round(extract(epoch FROM now() - lease_expires_at)::numeric, 1)
		FROM inbox WHERE status = 'processing' AND lease_expires_at < now() ORDER BY lease_expires_at LIMIT 5`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var id, by string
		var attempts int
		var ago float64
		if rows.Scan(&id, &attempts, &by, &ago) == nil {
			parts = append(parts, fmt.Sprintf("%s (attempt %d, %s, expired %.1fs ago)", id, attempts, by, ago))
		}
	}
	return strings.Join(parts, "; ")
}

// Run gathers one scenario's history and prints its summary line when the
// test ends, passed or failed.
type Run struct {
	// T is the scenario's test.
	T testing.TB
	// DB inspects the scenario's database.
	DB *pgxpool.Pool
	// Sink is the HTTP sink, nil when the scenario has none.
	Sink *Sink
	// Ledger records the faults.
	Ledger *Ledger
	// Lease is the INBOXD_LEASE the daemons run with.
	Lease time.Duration

	start    time.Time
	mu       sync.Mutex
	expected map[string][]string // by source
	checked  bool
	diagnose []func() string
	lost     int
	txDups   int
	extDups  int
	bound    float64
	notes    []string
}

// NewRun starts the history of t's scenario on db. Its summary line is
// printed when t ends.
func NewRun(t testing.TB, db *pgxpool.Pool, sink *Sink, lease time.Duration) *Run {
	r := &Run{T: t, DB: db, Sink: sink, Ledger: NewLedger(t), Lease: lease, start: time.Now(),
		expected: map[string][]string{}}
	t.Cleanup(r.printSummary)
	return r
}

// OnFailure registers a diagnostic (Kafka group state, metrics, …) whose
// text Check logs when the test has failed by then; it runs while the
// daemons still do.
func (r *Run) OnFailure(f func() string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.diagnose = append(r.diagnose, f)
}

// Expect adds acknowledged (or inserted) events that must end processed.
func (r *Run) Expect(source string, ids ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expected[source] = append(r.expected[source], ids...)
}

// Events is the number of expected events.
func (r *Run) Events() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ids := range r.expected {
		n += len(ids)
	}
	return n
}

// Note adds "key=value" to the summary line.
func (r *Run) Note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// WaitProcessed waits until every expected event is processed, or until
// every one is in a final state (some dead or rejected: waiting longer
// cannot help). It fails t (Error, not Fatal: the checks still run) when
// timeout passes or rows settled unprocessed, with the inbox's status
// counts, and reports whether all were processed.
func (r *Run) WaitProcessed(timeout time.Duration) bool {
	r.T.Helper()
	r.mu.Lock()
	expected := make(map[string][]string, len(r.expected))
	total := 0
	for s, ids := range r.expected {
		expected[s] = ids
		total += len(ids)
	}
	r.mu.Unlock()
	interval := 200 * time.Millisecond
	if total > 20000 {
		interval = time.Second
	}
	processed, final := 0, 0
	start := time.Now()
	settled := waitCond(timeout, interval, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, f := 0, 0
		for s, ids := range expected {
			cp, cf, err := CountSettled(ctx, r.DB, s, ids)
			if err != nil {
				return false
			}
			p, f = p+cp, f+cf
		}
		processed, final = p, f
		return f == total
	})
	if settled && processed == total {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	counts, _ := StatusCounts(ctx, r.DB)
	if settled {
		r.T.Errorf("SETTLED UNPROCESSED: after %s every expected event is final but only %d of %d are processed; inbox: %s",
			time.Since(start).Round(100*time.Millisecond), processed, total, formatCounts(counts))
	} else {
		r.T.Errorf("NOT PROCESSED IN TIME: %d of %d expected events processed (%d final) after %s; inbox: %s",
			processed, total, final, timeout, formatCounts(counts))
	}
	return false
}

// Check runs the history checks: lost, transactional duplicates and (with a
// sink) external duplicates against the ledger's bound; then, if the test
// has failed, the OnFailure diagnostics.
func (r *Run) Check() {
	r.T.Helper()
	r.mu.Lock()
	expected := r.expected
	r.mu.Unlock()
	lost := 0
	for s, ids := range expected {
		if n := CheckLost(r.T, r.DB, s, ids); n > 0 {
			lost += n
		}
	}
	tx := CheckTxDuplicates(r.T, r.DB)
	var ext int
	var bound float64
	if r.Sink != nil {
		ext, bound = CheckExternalDuplicates(r.T, r.Sink, r.Ledger)
	}
	r.mu.Lock()
	r.checked, r.lost, r.txDups, r.extDups, r.bound = true, lost, tx, ext, bound
	diagnose := r.diagnose
	r.mu.Unlock()
	if r.T.Failed() {
		for _, f := range diagnose {
			r.T.Logf("diagnostic: %s", f())
		}
	}
}

// Summary is the scenario's one-line summary.
func (r *Run) Summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	events := 0
	for _, ids := range r.expected {
		events += len(ids)
	}
	status := "PASS"
	if r.T.Failed() {
		status = "FAIL"
	}
	checks := "checks=not-run"
	if r.checked {
		checks = fmt.Sprintf("lost=%d tx_dups=%d", r.lost, r.txDups)
		if r.Sink != nil {
			checks += fmt.Sprintf(" ext_dups=%d bound=%.1f", r.extDups, r.bound)
		}
	}
	line := fmt.Sprintf("faultsuite: %-36s %s events=%d faults=%d(%s) %s duration=%s",
		r.T.Name(), status, events, r.Ledger.Count(), r.Ledger.Kinds(), checks,
		time.Since(r.start).Round(100*time.Millisecond))
	if len(r.notes) > 0 {
		line += " " + strings.Join(r.notes, " ")
	}
	return line
}

func (r *Run) printSummary() {
	line := r.Summary()
	fmt.Fprintln(os.Stdout, line)
	if p := os.Getenv("INBOXD_FAULT_SUMMARY"); p != "" {
		if f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}
