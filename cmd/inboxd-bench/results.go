package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Results is what one run measured; results.json holds it.
type Results struct {
	// GeneratedAt is when the run started.
	GeneratedAt time.Time `json:"generated_at"`
	// Machine says where it ran.
	Machine Machine `json:"machine"`
	// Events is the number of events of each throughput measurement.
	Events int `json:"events"`
	// Settings are the measurements' settings.
	Settings Settings `json:"settings"`
	// Rates are the throughput measurements, in the order they ran.
	Rates []Rate `json:"rates"`
	// Ratios are the rates' ratios (inboxd to the yardstick and to River).
	Ratios []Ratio `json:"ratios"`
	// Latency is the latency measurement, when it ran.
	Latency *LatencyResults `json:"latency,omitempty"`
	// Outbox is the outbox measurement's detail (every run, the latency),
	// when it ran; its medians are the rates outbox and outbox-publish.
	Outbox *OutboxResults `json:"outbox,omitempty"`
	// OutboxCodecs are the relay's runs with each Kafka codec, when the
	// codec measurement ran.
	OutboxCodecs []OutboxCodecRun `json:"outbox_codecs,omitempty"`
	// Webhook is the webhook measurement's detail (the ratio, the latency
	// run), when it ran; its rates are webhook and webhook-kafka.
	Webhook *WebhookResults `json:"webhook,omitempty"`
	// Console is the console measurement (every ops listing on a large
	// inbox), when it ran.
	Console *ConsoleResults `json:"console,omitempty"`
	// Memory are the peak-RSS measurements, when they ran.
	Memory []MemoryRun `json:"memory,omitempty"`
	// Targets are the targets checked against this run.
	Targets []Target `json:"targets"`
	// Diagnosis is where the time goes, when the explain measurement ran.
	Diagnosis *Diagnosis `json:"diagnosis,omitempty"`
}

// Machine describes the machine and the versions a run used.
type Machine struct {
	// CPUs is runtime.NumCPU().
	CPUs int `json:"cpus"`
	// GOOS and GOARCH are the platform.
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
	// Go is the Go version the benchmark was built with.
	Go string `json:"go"`
	// PostgreSQL is the server's version().
	PostgreSQL string `json:"postgresql"`
	// Autovacuum is the server's autovacuum setting: with it off, dead
	// rows pile up in the inbox for as long as a run lasts.
	Autovacuum string `json:"autovacuum"`
	// Commit is `git describe --always --dirty` of the working tree.
	Commit string `json:"commit"`
	// LoadAverageStart and LoadAverageEnd are the one-minute load averages
	// (/proc/loadavg) when the run started and ended: above the CPU count,
	// something else was competing for the machine.
	LoadAverageStart float64 `json:"load_average_start"`
	LoadAverageEnd   float64 `json:"load_average_end"`
}

// loadAverage is the one-minute load average, 0 when unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	_, _ = fmt.Sscan(string(b), &l)
	return l
}

// Settings are the settings of a run that are not inboxd's defaults.
type Settings struct {
	// RiverWorkers is River's MaxWorkers.
	RiverWorkers int `json:"river_workers"`
	// RiverConns is the size of River's pool.
	RiverConns int `json:"river_conns"`
	// RiverFetchCooldownMS is River's FetchCooldown in milliseconds.
	RiverFetchCooldownMS int `json:"river_fetch_cooldown_ms"`
	// RiverFetchPollIntervalMS is River's FetchPollInterval in milliseconds.
	RiverFetchPollIntervalMS int64 `json:"river_fetch_poll_interval_ms"`
	// InsertBatch is the jobs per InsertManyFast call (and the rows per
	// insert statement of the raw and pool measurements).
	InsertBatch int `json:"insert_batch"`
	// Retained is the processed rows in the inbox of the retained
	// measurement.
	Retained int `json:"retained"`
	// DaemonEnv are the INBOXD_* variables of the environment passed to the
	// daemon over its defaults (none for a run with the defaults).
	DaemonEnv []string `json:"daemon_env,omitempty"`
}

// Rate is one throughput measurement.
type Rate struct {
	// Name is raw, river, pool, e2e, retained, rabbitmq-publish, rabbitmq,
	// rabbitmq-prefetch1000, nats-publish, nats, outbox, outbox-publish,
	// webhook or webhook-kafka
	// (the -publish rates are the broker's publishing alone: the ceiling of
	// the run beside them; outbox-publish is a raw Kafka producer's).
	Name string `json:"name"`
	// Label says what was measured, for tables and charts.
	Label string `json:"label"`
	// Events is how many events were moved.
	Events int `json:"events"`
	// Seconds is how long that took.
	Seconds float64 `json:"seconds"`
	// PerSecond is Events / Seconds.
	PerSecond float64 `json:"events_per_second"`
	// StartupSeconds (end to end) is the time from app.Main to the first
	// row in the inbox, included in Seconds.
	StartupSeconds float64 `json:"startup_seconds,omitempty"`
	// PrepSeconds (retained) is the time taken to insert and vacuum the
	// retained rows, not included in Seconds.
	PrepSeconds float64 `json:"prep_seconds,omitempty"`
	// CPU is where the CPU time of the run went.
	CPU *CPUUse `json:"cpu,omitempty"`
	// OutcomeWriteDelayP99MS (end to end) is the p99 of the daemon's
	// inboxd_worker_outcome_write_delay_seconds at this full rate: the
	// window in which a crash re-runs handlers that already succeeded.
	OutcomeWriteDelayP99MS float64 `json:"outcome_write_delay_p99_ms,omitempty"`
	// Writes (raw, pool, e2e) is what the run wrote to the inbox table and
	// its indexes, per event, and the WAL it made.
	Writes *WriteCost `json:"writes,omitempty"`
}

// CPUUse is the CPU time of a measurement, in seconds, from its start
// until its last event is done.
type CPUUse struct {
	// Process is this process: what is measured (the worker pool, River,
	// the in-process daemon and kfake), the producer and the polls.
	Process float64 `json:"process_seconds"`
	// Postgres is the measurement database's client backends, not the
	// server's background processes (WAL writer, checkpointer,
	// autovacuum).
	Postgres float64 `json:"postgres_backends_seconds"`
	// Broker (the RabbitMQ and NATS runs) is the broker's server processes
	// on this machine (beam.smp, nats-server), which share its CPUs.
	Broker float64 `json:"broker_seconds,omitempty"`
	// Wall is the run's length.
	Wall float64 `json:"wall_seconds"`
}

func newRate(name, label string, n int, d time.Duration) Rate {
	return Rate{Name: name, Label: label, Events: n, Seconds: d.Seconds(), PerSecond: float64(n) / d.Seconds()}
}

// Postgres is the PostgreSQL backends' CPU time per event, in seconds (0
// when not measured).
func (r Rate) Postgres() float64 {
	if r.CPU == nil || r.Events == 0 {
		return 0
	}
	return r.CPU.Postgres / float64(r.Events)
}

func (r Rate) note() string {
	var s string
	if r.StartupSeconds > 0 {
		s += fmt.Sprintf(", first row after %.2fs", r.StartupSeconds)
	}
	if r.PrepSeconds > 0 {
		s += fmt.Sprintf(", retained rows made in %.0fs", r.PrepSeconds)
	}
	if r.CPU != nil {
		s += fmt.Sprintf("; CPU: this process %.1fs, PostgreSQL backends %.1fs", r.CPU.Process, r.CPU.Postgres)
		if r.CPU.Broker > 0 {
			s += fmt.Sprintf(", broker %.1fs", r.CPU.Broker)
		}
	}
	if r.OutcomeWriteDelayP99MS > 0 {
		s += fmt.Sprintf("; outcome write delay p99 %.1f ms", r.OutcomeWriteDelayP99MS)
	}
	return s
}

// Ratio is one rate divided by another.
type Ratio struct {
	// Name is "<rate> / <rate>".
	Name string `json:"name"`
	// Value is the quotient.
	Value float64 `json:"value"`
}

// LatencyResults is the latency measurement.
type LatencyResults struct {
	// MaxRate is the end-to-end maximum (events/s) the loads are fractions
	// of.
	MaxRate float64 `json:"max_rate"`
	// Load is the fraction whose p99 is checked against the target.
	Load float64 `json:"target_load"`
	// PhaseSeconds is how long each load was produced.
	PhaseSeconds float64 `json:"phase_seconds"`
	// ProducerLingerMS is the Kafka producer's linger.
	ProducerLingerMS float64 `json:"producer_linger_ms"`
	// Points are the loads, lowest first.
	Points []LatencyPoint `json:"points"`
}

// LatencyPoint is the latency at one offered load.
type LatencyPoint struct {
	// Load is the fraction of MaxRate offered.
	Load float64 `json:"load"`
	// Offered is the offered rate, events/s.
	Offered float64 `json:"offered"`
	// Produced is the rate the producer achieved, events/s.
	Produced float64 `json:"produced"`
	// Events is how many events were produced.
	Events int `json:"events"`
	// DrainSeconds is how long after the producer stopped the last event
	// was processed (near zero when the daemon kept up).
	DrainSeconds float64 `json:"drain_seconds"`
	// ReceivedToProcessed is processed_at − received_at.
	ReceivedToProcessed Percentiles `json:"received_to_processed"`
	// ProducedToProcessed is processed_at − the produced_at header.
	ProducedToProcessed Percentiles `json:"produced_to_processed"`
	// CPU is the CPU time of the phase: this process (the daemon, kfake and
	// the producer) and the database's backends.
	CPU *CPUUse `json:"cpu,omitempty"`
	// OutcomeWriteDelayP99MS is the p99 of the daemon's
	// inboxd_worker_outcome_write_delay_seconds (a handler's return to its
	// outcome's commit) over this load's phase alone, in milliseconds,
	// interpolated within the histogram's bucket (its bounds are 20, 50 and
	// 100 ms around the target, so "below 50 ms" is exact); 0 when nothing
	// was observed.
	OutcomeWriteDelayP99MS float64 `json:"outcome_write_delay_p99_ms"`
	// OutcomeWrites is how many outcomes the histogram observed in the
	// phase (about Events: one per handled row).
	OutcomeWrites int64 `json:"outcome_writes"`
}

// Percentiles of a latency, in milliseconds.
type Percentiles struct {
	// P50MS, P95MS and P99MS are percentile_cont's.
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	P99MS float64 `json:"p99_ms"`
	// MaxMS is the largest.
	MaxMS float64 `json:"max_ms"`
}

// MemoryRun is the inboxd binary's peak RSS over one run.
type MemoryRun struct {
	// PayloadBytes is each event's payload size.
	PayloadBytes int `json:"payload_bytes"`
	// Events is how many events were processed.
	Events int `json:"events"`
	// PeakRSSBytes is VmHWM at the end of the run.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// TargetBytes is the bound.
	TargetBytes int64 `json:"target_bytes"`
	// Seconds is the run's length, process start included.
	Seconds float64 `json:"seconds"`
	// PerSecond is Events / Seconds.
	PerSecond float64 `json:"events_per_second"`
}

// LongResults is the sustained measurement (`-run long`); long.json holds
// it.
type LongResults struct {
	// GeneratedAt is when the run started.
	GeneratedAt time.Time `json:"generated_at"`
	// Machine says where it ran.
	Machine Machine `json:"machine"`
	// MaxRate is the end-to-end maximum (events/s).
	MaxRate float64 `json:"max_rate"`
	// Load is the fraction of it offered.
	Load float64 `json:"load"`
	// Offered is the offered rate, events/s.
	Offered float64 `json:"offered"`
	// Minutes is the length of each run.
	Minutes int `json:"minutes"`
	// Retention is INBOXD_RETENTION of the run with retention.
	Retention string `json:"retention"`
	// VacuumEvery is the period of the benchmark's own VACUUM of the inbox
	// (standing in for autovacuum when the server has it off); empty for
	// none.
	VacuumEvery string `json:"vacuum_every,omitempty"`
	// Runs are the run with retention, then the one without.
	Runs []LongRun `json:"runs"`
	// RetentionRateRatio is the processed rate with retention divided by
	// the one without.
	RetentionRateRatio float64 `json:"retention_rate_ratio"`
}

// LongRun is one sustained run.
type LongRun struct {
	// Name says which.
	Name string `json:"name"`
	// Retention is whether retention deleted rows during the run.
	Retention bool `json:"retention"`
	// Minutes are the per-minute samples.
	Minutes []LongMinute `json:"minutes"`
	// Produced is how many events were produced.
	Produced int `json:"produced"`
	// ProducedPerSecond is the rate the producer achieved.
	ProducedPerSecond float64 `json:"produced_per_second"`
	// ProcessedPerSecond is the rows processed during the run per second.
	ProcessedPerSecond float64 `json:"processed_per_second"`
	// Drained is whether every event was processed within the drain
	// limit after the producer stopped.
	Drained bool `json:"drained"`
	// DrainSeconds is how long after the producer stopped the last event
	// was processed (or, when not Drained, how long was waited).
	DrainSeconds float64 `json:"drain_seconds"`
	// BacklogAfterDrain is the rows left unprocessed when not Drained.
	BacklogAfterDrain int64 `json:"backlog_after_drain,omitempty"`
	// Vacuums and VacuumSeconds are the benchmark's own VACUUMs of the
	// inbox during the run and the time they took (-vacuum-every).
	Vacuums       int     `json:"vacuums,omitempty"`
	VacuumSeconds float64 `json:"vacuum_seconds,omitempty"`
	// LateWindows counts the one-second windows read back so late that
	// retention may have deleted rows before they were counted.
	LateWindows int `json:"late_windows,omitempty"`
}

// LongMinute is one minute of a sustained run.
type LongMinute struct {
	// Minute counts from 1.
	Minute int `json:"minute"`
	// ProcessedPerSecond is the rows whose processed_at falls in the minute,
	// per second.
	ProcessedPerSecond float64 `json:"processed_per_second"`
	// ReceivedToProcessedP99MS is the p99 of processed_at − received_at.
	ReceivedToProcessedP99MS float64 `json:"received_to_processed_p99_ms"`
	// ProducedToProcessedP50MS and ProducedToProcessedP99MS are percentiles
	// of processed_at − produced_at.
	ProducedToProcessedP50MS float64 `json:"produced_to_processed_p50_ms"`
	ProducedToProcessedP99MS float64 `json:"produced_to_processed_p99_ms"`
	// InboxBytes is pg_total_relation_size('inbox') at the minute's end.
	InboxBytes int64 `json:"inbox_bytes"`
	// Backlog is the received and processing rows at the minute's end.
	Backlog int64 `json:"backlog"`
	// DeletedPerSecond is the rows deleted during the minute per second
	// (pg_stat_user_tables.n_tup_del, which the statistics collector may
	// report a little late).
	DeletedPerSecond float64 `json:"deleted_per_second"`
	// DeadTuples and Autovacuums are pg_stat_user_tables' n_dead_tup and
	// autovacuum_count for the inbox at the minute's end.
	DeadTuples  int64 `json:"dead_tuples"`
	Autovacuums int64 `json:"autovacuums"`
	// OfferedSoFar is how many events had been produced.
	OfferedSoFar int64 `json:"offered_so_far"`
}

// Target is one of the targets, checked.
type Target struct {
	// Name says what is compared with what.
	Name string `json:"name"`
	// Value is the measured value.
	Value float64 `json:"value"`
	// Bound is the target's bound.
	Bound float64 `json:"bound"`
	// AtLeast is true when Value must be ≥ Bound, false when < Bound.
	AtLeast bool `json:"at_least"`
	// Unit is "×", "ms" or "MB".
	Unit string `json:"unit"`
	// Met says whether the target is met.
	Met bool `json:"met"`
	// Miss is by how much it was missed, as a fraction of Bound (0 when
	// met).
	Miss float64 `json:"miss,omitempty"`
}

// outcomeWriteTargetLoad is the offered load (a fraction of the end-to-end
// maximum) at which the issue bounds the outcome-write p99 (50 ms); -loads
// has it by default.
const outcomeWriteTargetLoad = 0.8

func (r *Results) rate(name string) (Rate, bool) {
	for i := len(r.Rates) - 1; i >= 0; i-- {
		if r.Rates[i].Name == name {
			return r.Rates[i], true
		}
	}
	return Rate{}, false
}

// evaluate computes the ratios and checks the targets that the run
// measured.
func (r *Results) evaluate() {
	r.Ratios, r.Targets = nil, nil
	ratio := func(a, b string) (float64, bool) {
		x, ok1 := r.rate(a)
		y, ok2 := r.rate(b)
		if !ok1 || !ok2 || y.PerSecond == 0 {
			return 0, false
		}
		v := x.PerSecond / y.PerSecond
		r.Ratios = append(r.Ratios, Ratio{Name: a + " / " + b, Value: v})
		return v, true
	}
	check := func(name string, v, bound float64, atLeast bool, unit string) {
		t := Target{Name: name, Value: v, Bound: bound, AtLeast: atLeast, Unit: unit}
		if atLeast {
			t.Met = v >= bound
			if !t.Met {
				t.Miss = (bound - v) / bound
			}
		} else {
			t.Met = v < bound
			if !t.Met {
				t.Miss = (v - bound) / bound
			}
		}
		r.Targets = append(r.Targets, t)
	}
	// Issue 20's targets.
	if v, ok := ratio("e2e", "river"); ok {
		check("inboxd end to end ≥ 2.0× River", v, 2.0, true, "×")
	}
	if v, ok := ratio("e2e", "raw"); ok {
		check("inboxd end to end ≥ 1.0× the yardstick", v, 1.0, true, "×")
	}
	if v, ok := ratio("pool", "raw"); ok {
		check("inboxd pool ≥ 1.0× the yardstick", v, 1.0, true, "×")
	}
	if v, ok := ratio("retained", "e2e"); ok {
		check("end to end on 2M retained rows ≥ 0.9× without", v, 0.9, true, "×")
	}
	if e, ok := r.rate("e2e"); ok && e.CPU != nil {
		if y, ok := r.rate("raw"); ok && y.CPU != nil && e.Events > 0 && y.Events > 0 {
			check("PostgreSQL CPU per event end to end < the yardstick's", e.CPU.Postgres/float64(e.Events)*1e6,
				y.CPU.Postgres/float64(y.Events)*1e6, false, "µs")
		}
	}
	// Issue 30's target: a batch route of 100 rows against one row at a
	// time, the same upsert end to end; and PostgreSQL's CPU per event.
	if v, ok := ratio("batch-100", "batch-row"); ok {
		check("batch route (100 rows) ≥ 3.0× per row, end to end", v, 3.0, true, "×")
		b, _ := r.rate("batch-100")
		p, _ := r.rate("batch-row")
		if b.CPU != nil && p.CPU != nil && b.Postgres() > 0 {
			r.Ratios = append(r.Ratios, Ratio{Name: "PostgreSQL CPU per event: batch-row / batch-100", Value: p.Postgres() / b.Postgres()})
		}
	}
	ratio("e2e", "e2e-claimed")
	ratio("retained", "raw")
	ratio("retained", "river")
	ratio("pool", "river")
	ratio("raw", "river")
	for _, b := range brokerRuns {
		ratio(b.run, b.ceiling)
		ratio(b.run, "e2e")
	}
	if v, ok := ratio("outbox", "outbox-publish"); ok && r.Outbox != nil {
		r.Outbox.Ratio = v
	}
	if r.Outbox != nil && r.Outbox.Latency != nil {
		check(fmt.Sprintf("p99 outbox commit→consumed at %.0f%% load < 100 ms", r.Outbox.Latency.Load*100), r.Outbox.Latency.CommitToConsumed.P99MS, 100, false, "ms")
	}
	if v, ok := ratio("webhook", "webhook-kafka"); ok && r.Webhook != nil {
		r.Webhook.Ratio = v
	}
	if r.Latency != nil {
		for _, p := range r.Latency.Points {
			if p.Load == r.Latency.Load {
				check(fmt.Sprintf("p99 received→processed at %.0f%% load < 50 ms", p.Load*100), p.ReceivedToProcessed.P99MS, 50, false, "ms")
				check(fmt.Sprintf("p99 produced→processed at %.0f%% load < 100 ms", p.Load*100), p.ProducedToProcessed.P99MS, 100, false, "ms")
			}
			if p.Load == outcomeWriteTargetLoad && p.OutcomeWrites > 0 {
				check(fmt.Sprintf("outcome-write p99 at %.0f%% load < 50 ms", p.Load*100), p.OutcomeWriteDelayP99MS, 50, false, "ms")
			}
		}
	}
	if c := r.Console; c != nil {
		// Issue 28's: every listing under 200 ms at p95 on the large inbox.
		slowest := ConsoleQuery{}
		for _, q := range c.Queries {
			if q.P95MS > slowest.P95MS {
				slowest = q
			}
		}
		check(fmt.Sprintf("console/CLI listings p95 on %s rows < %.0f ms (slowest: %s)", comma(float64(c.Rows)), c.TargetMS, slowest.Name),
			slowest.P95MS, c.TargetMS, false, "ms")
	}
	for _, m := range r.Memory {
		check(fmt.Sprintf("peak RSS, %s payloads < %.0f MB", sizeLabel(m.PayloadBytes), float64(m.TargetBytes)/1e6),
			float64(m.PeakRSSBytes)/1e6, float64(m.TargetBytes)/1e6, false, "MB")
	}
}

// printResults prints the run's tables.
func printResults(out io.Writer, r *Results, long *LongResults) {
	fmt.Fprintln(out)
	if len(r.Rates) > 0 {
		raw, hasRaw := r.rate("raw")
		river, hasRiver := r.rate("river")
		const format = "%-38s %9s %12s %8s %18s %18s\n"
		fmt.Fprintf(out, format, "throughput", "events/s", "÷ yardstick", "÷ River", "CPU µs/event", "CPU µs/event")
		fmt.Fprintf(out, format, "", "", "", "", "(this process)", "(PG backends)")
		for _, x := range r.Rates {
			row := []string{"", "", "", ""}
			if hasRaw {
				row[0] = fmt.Sprintf("%.2f", x.PerSecond/raw.PerSecond)
			}
			if hasRiver {
				row[1] = fmt.Sprintf("%.2f", x.PerSecond/river.PerSecond)
			}
			if x.CPU != nil {
				row[2] = fmt.Sprintf("%.1f", x.CPU.Process/float64(x.Events)*1e6)
				row[3] = fmt.Sprintf("%.1f", x.CPU.Postgres/float64(x.Events)*1e6)
			}
			fmt.Fprintf(out, format, x.Label, comma(x.PerSecond), row[0], row[1], row[2], row[3])
		}
		fmt.Fprintln(out)
		printWriteCosts(out, r.Rates)
	}
	if rows := brokerRows(r); len(rows) > 0 {
		const format = "%-38s %9s %15s %12s %18s\n"
		fmt.Fprintln(out, "other brokers → processed, against the broker's own publish rate (the ceiling) and Kafka end to end:")
		fmt.Fprintf(out, format, "", "events/s", "÷ publish rate", "÷ Kafka e2e", "CPU µs/event")
		fmt.Fprintf(out, format, "", "", "", "", "(broker)")
		for _, row := range rows {
			fmt.Fprintf(out, format, row[0], row[1], row[2], row[3], row[4])
		}
		fmt.Fprintln(out)
	}
	if ob := r.Outbox; ob != nil {
		fmt.Fprintf(out, "outbox → Kafka (kfake), %s rows of %d bytes over %d keys; relay runs and raw producer runs alternating:\n", comma(float64(ob.Events)), ob.PayloadBytes, ob.Keys)
		for i := 0; i+1 < len(ob.Runs); i += 2 {
			fmt.Fprintf(out, "  run %d: relay %s msg/s, raw producer %s msg/s, ratio %.3f\n", i/2+1, comma(ob.Runs[i].PerSecond), comma(ob.Runs[i+1].PerSecond), ob.Runs[i].PerSecond/ob.Runs[i+1].PerSecond)
		}
		fmt.Fprintf(out, "  medians: relay ÷ raw producer = %.3f\n", ob.Ratio)
		if l := ob.Latency; l != nil {
			fmt.Fprintf(out, "  at %.0f%% load (%s rows/s offered, %s written, one per transaction, %.0fs): commit→consumed p50 %.1f p95 %.1f p99 %.1f max %.1f ms; created_at→published_at p50 %.1f p95 %.1f p99 %.1f ms\n",
				l.Load*100, comma(l.Offered), comma(l.Written), l.Seconds, l.CommitToConsumed.P50MS, l.CommitToConsumed.P95MS, l.CommitToConsumed.P99MS, l.CommitToConsumed.MaxMS,
				l.CreatedToPublished.P50MS, l.CreatedToPublished.P95MS, l.CreatedToPublished.P99MS)
		}
		fmt.Fprintln(out)
	}
	if wh := r.Webhook; wh != nil {
		fmt.Fprintf(out, "webhooks in, %s signed requests of %d bytes, %d senders, against the same rows from Kafka (both until every row is stored):\n", comma(float64(wh.Events)), wh.PayloadBytes, wh.Concurrency)
		if x, ok := r.rate("webhook"); ok {
			fmt.Fprintf(out, "  webhook %s requests/s (%d retried)", comma(x.PerSecond), wh.Retried)
		}
		if k, ok := r.rate("webhook-kafka"); ok {
			fmt.Fprintf(out, ", Kafka source %s rows/s: ratio %.2f", comma(k.PerSecond), wh.Ratio)
		}
		fmt.Fprintln(out)
		if l := wh.Latency; l != nil {
			fmt.Fprintf(out, "  at %.0f%% load (%s requests/s offered, %s sent, %.0fs, %d not 200): request p50 %.1f p95 %.1f p99 %.1f max %.1f ms\n",
				l.Load*100, comma(l.Offered), comma(l.Sent), l.Seconds, l.Non200, l.Request.P50MS, l.Request.P95MS, l.Request.P99MS, l.Request.MaxMS)
		}
		fmt.Fprintln(out)
	}
	if r.Latency != nil {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(out, "latency (ms) at offered loads, fractions of %s events/s, %.0fs each:\n", comma(r.Latency.MaxRate), r.Latency.PhaseSeconds)
		fmt.Fprintln(tw, "load\toffered/s\treceived→processed p50\tp95\tp99\tproduced→processed p50\tp95\tp99\tmax\toutcome write p99\tdrain s\t")
		for _, p := range r.Latency.Points {
			fmt.Fprintf(tw, "%.0f%%\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t\n", p.Load*100, comma(p.Offered),
				p.ReceivedToProcessed.P50MS, p.ReceivedToProcessed.P95MS, p.ReceivedToProcessed.P99MS,
				p.ProducedToProcessed.P50MS, p.ProducedToProcessed.P95MS, p.ProducedToProcessed.P99MS, p.ProducedToProcessed.MaxMS,
				p.OutcomeWriteDelayP99MS, p.DrainSeconds)
		}
		tw.Flush()
		fmt.Fprintln(out)
	}
	if len(r.Memory) > 0 {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(out, "memory of the inboxd binary (subprocess, full rate):")
		fmt.Fprintln(tw, "payload\tevents\tpeak RSS (VmHWM)\tevents/s\t")
		for _, m := range r.Memory {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", sizeLabel(m.PayloadBytes), m.Events, megabytes(m.PeakRSSBytes), comma(m.PerSecond))
		}
		tw.Flush()
		fmt.Fprintln(out)
	}
	if long != nil {
		fmt.Fprintf(out, "sustained runs at %.0f%% of %s = %s events/s, %d minutes each:\n", long.Load*100, comma(long.MaxRate), comma(long.Offered), long.Minutes)
		for _, run := range long.Runs {
			fmt.Fprintf(out, "  %s\n", run.Name)
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "minute\tprocessed/s\tp99 received→processed ms\tp99 produced→processed ms\tinbox MB\tbacklog\tdeleted/s\tdead tuples\tautovacuums\t")
			for _, m := range run.Minutes {
				fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.1f\t%.1f\t%d\t%s\t%d\t%d\t\n", m.Minute, comma(m.ProcessedPerSecond), m.ReceivedToProcessedP99MS,
					m.ProducedToProcessedP99MS, float64(m.InboxBytes)/1e6, m.Backlog, comma(m.DeletedPerSecond), m.DeadTuples, m.Autovacuums)
			}
			tw.Flush()
			if run.Drained {
				fmt.Fprintf(out, "  processed %s/s over the run (produced %s/s), drained %.1fs after the producer stopped\n",
					comma(run.ProcessedPerSecond), comma(run.ProducedPerSecond), run.DrainSeconds)
			} else {
				fmt.Fprintf(out, "  processed %s/s over the run (produced %s/s), %d rows still unprocessed %.0fs after the producer stopped\n",
					comma(run.ProcessedPerSecond), comma(run.ProducedPerSecond), run.BacklogAfterDrain, run.DrainSeconds)
			}
		}
		if long.RetentionRateRatio > 0 {
			fmt.Fprintf(out, "  rate with retention ÷ without: %.3f (retention costs more than 20%% of the rate if the run with it falls behind the offered %.0f%% of the maximum)\n",
				long.RetentionRateRatio, long.Load*100)
		}
		fmt.Fprintln(out)
	}
	if len(r.Targets) > 0 {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(out, "targets:")
		for _, t := range r.Targets {
			verdict := "met"
			if !t.Met {
				verdict = fmt.Sprintf("MISSED by %.0f%%", t.Miss*100)
			}
			val := fmt.Sprintf("%.2f%s", t.Value, t.Unit)
			if t.Unit != "×" {
				val = fmt.Sprintf("%.1f %s", t.Value, t.Unit)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", t.Name, val, verdict)
		}
		tw.Flush()
	}
}

// brokerRuns are the RabbitMQ and NATS runs, each with the rate of its
// ceiling (the broker's publishing alone).
var brokerRuns = []struct{ run, ceiling string }{
	{"rabbitmq", "rabbitmq-publish"},
	{"rabbitmq-prefetch1000", "rabbitmq-publish"},
	{"nats", "nats-publish"},
}

// brokerRows are the rows of the table of the broker runs that r holds:
// label, events/s, ÷ its ceiling, ÷ the Kafka end-to-end run (empty when
// that did not run), the broker's CPU µs per event (empty when not
// measured).
func brokerRows(r *Results) [][5]string {
	var rows [][5]string
	e2e, hasE2E := r.rate("e2e")
	for _, b := range brokerRuns {
		x, ok := r.rate(b.run)
		if !ok {
			continue
		}
		row := [5]string{x.Label, comma(x.PerSecond), "", "", ""}
		if x.CPU != nil && x.CPU.Broker > 0 {
			row[4] = fmt.Sprintf("%.1f", x.CPU.Broker/float64(x.Events)*1e6)
		}
		if c, ok := r.rate(b.ceiling); ok && c.PerSecond > 0 {
			row[2] = fmt.Sprintf("%.2f", x.PerSecond/c.PerSecond)
		}
		if hasE2E && e2e.PerSecond > 0 {
			row[3] = fmt.Sprintf("%.2f", x.PerSecond/e2e.PerSecond)
		}
		rows = append(rows, row)
	}
	return rows
}

// writeResults writes results.json, rates.png and latency.png (long.json
// for a long run) to dir.
func writeResults(dir string, r *Results, long *LongResults) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, v any) error {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
	}
	if len(r.Rates) > 0 || r.Latency != nil || len(r.Memory) > 0 || len(r.OutboxCodecs) > 0 || r.Console != nil {
		if err := write("results.json", r); err != nil {
			return err
		}
	}
	if len(r.Rates) > 0 {
		if err := ratesChart(filepath.Join(dir, "rates.png"), r); err != nil {
			return fmt.Errorf("rates chart: %w", err)
		}
	}
	if r.Latency != nil {
		if err := latencyChart(filepath.Join(dir, "latency.png"), r); err != nil {
			return fmt.Errorf("latency chart: %w", err)
		}
	}
	if long != nil {
		if err := write("long.json", long); err != nil {
			return err
		}
	}
	return nil
}

// comma formats f rounded to an integer with thousands separators.
func comma(f float64) string {
	s := fmt.Sprintf("%.0f", f)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// replot draws the charts of the results in file into dir (file's
// directory when empty), measuring nothing.
func replot(file, dir string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if dir == "" {
		dir = filepath.Dir(file)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if len(r.Rates) > 0 {
		if err := ratesChart(filepath.Join(dir, "rates.png"), &r); err != nil {
			return fmt.Errorf("rates chart: %w", err)
		}
	}
	if r.Latency != nil {
		if err := latencyChart(filepath.Join(dir, "latency.png"), &r); err != nil {
			return fmt.Errorf("latency chart: %w", err)
		}
	}
	return nil
}
