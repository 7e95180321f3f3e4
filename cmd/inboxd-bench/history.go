package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/engine"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/worker"
)

// The history part: what a row's history (migration 017) costs. The
// worker pool (worker.Config's defaults, a no-op handler) drains a backlog
// of rows with the history and without it (engine.WithoutHistory), in
// pairs on databases of their own, the order alternating from round to
// round: on the happy path (every row processed at its first attempt, so
// that the history writes nothing and only the claim's part for lapsed
// reservations runs), then with 10 % of the rows failing their first
// attempt (each writing two entries: the failure and the end). Beside
// them, the claim statement alone with its history part and without it,
// alternating, in transactions rolled back on one backlog.

// HistoryResults is what -run history measured (docs/bench/history/results.json).
type HistoryResults struct {
	GeneratedAt time.Time `json:"generated_at"`
	Machine     Machine   `json:"machine"`
	// Events is the backlog each run drains; Rounds the pairs of runs per
	// scenario.
	Events int `json:"events"`
	Rounds int `json:"rounds"`
	// Scenarios are the happy path and 10 % failing.
	Scenarios []HistoryScenario `json:"scenarios"`
	// Claim is the claim statement alone.
	Claim HistoryClaim `json:"claim"`
}

// HistoryScenario is one scenario's pairs of runs and their medians.
type HistoryScenario struct {
	Name string `json:"name"`
	// FailingPercent of the rows fail their first attempt.
	FailingPercent int           `json:"failing_percent"`
	Pairs          []HistoryPair `json:"pairs"`
	// RateRatio is the median (nearest rank) of the pairs' rate ratios (with history over
	// without: below 1 is slower); RateRatioMin and Max their range.
	RateRatio    float64 `json:"rate_ratio_median"`
	RateRatioMin float64 `json:"rate_ratio_min"`
	RateRatioMax float64 `json:"rate_ratio_max"`
	// RateRatioGeoMean is the geometric mean of the pairs' rate ratios.
	RateRatioGeoMean float64 `json:"rate_ratio_geometric_mean"`
	// PostgresCPURatio and ProcessCPURatio are the medians of the pairs'
	// ratios of CPU per event (with over without: above 1 costs more).
	PostgresCPURatio float64 `json:"postgres_cpu_per_event_ratio_median"`
	ProcessCPURatio  float64 `json:"process_cpu_per_event_ratio_median"`
	// Entries is the history entries a run with history wrote (the first
	// pair's).
	Entries int64 `json:"entries_written"`
}

// HistoryPair is one round: the run with the history and the run without.
type HistoryPair struct {
	With    HistoryRun `json:"with"`
	Without HistoryRun `json:"without"`
	// WithFirst says which ran first.
	WithFirst bool `json:"with_first"`
	// RateRatio is With's rate over Without's; the CPU ratios are With's
	// CPU per event over Without's.
	RateRatio        float64 `json:"rate_ratio"`
	PostgresCPURatio float64 `json:"postgres_cpu_per_event_ratio"`
	ProcessCPURatio  float64 `json:"process_cpu_per_event_ratio"`
}

// HistoryRun is one run's figures.
type HistoryRun struct {
	PerSecond float64 `json:"events_per_second"`
	// PostgresMicros and ProcessMicros are CPU µs per event: the
	// database's client backends, and this process (the pool).
	PostgresMicros float64 `json:"postgres_cpu_us_per_event"`
	ProcessMicros  float64 `json:"process_cpu_us_per_event"`
	Entries        int64   `json:"entries_written"`
}

// HistoryClaim is the claim statement timed alone (-history-claims of
// each variant, alternating, each in a transaction rolled back).
type HistoryClaim struct {
	Backlog int `json:"backlog_rows"`
	Rows    int `json:"rows_per_claim"`
	Claims  int `json:"claims_per_variant"`
	// WithMS and WithoutMS are the median times of one claim.
	WithMS    float64 `json:"with_history_median_ms"`
	WithoutMS float64 `json:"without_history_median_ms"`
	// ExtraMS is the median of the paired differences (with minus without).
	ExtraMS float64 `json:"extra_median_ms"`
	// BiasMS is the same for pairs of the statement without the history's
	// part twice (first minus second): what the pairing measures of
	// nothing.
	BiasMS float64 `json:"identical_pairs_median_ms"`
}

// benchHistory runs the history part.
func benchHistory(ctx context.Context, env *environment, n, rounds, claims int, machine Machine, logf func(string, ...any)) (*HistoryResults, error) {
	res := &HistoryResults{GeneratedAt: time.Now().UTC().Truncate(time.Second), Machine: machine, Events: n, Rounds: rounds}
	for _, failing := range []int{0, 10} {
		if rounds == 0 {
			break // the claim alone
		}
		sc := HistoryScenario{Name: "happy path", FailingPercent: failing}
		if failing > 0 {
			sc.Name = fmt.Sprintf("%d %% failing once", failing)
		}
		for round := range rounds {
			var p HistoryPair
			p.WithFirst = round%2 == 0
			for _, with := range []bool{p.WithFirst, !p.WithFirst} {
				r, err := historyRun(ctx, env, n, failing, with)
				if err != nil {
					return nil, fmt.Errorf("%s, round %d: %w", sc.Name, round+1, err)
				}
				if with {
					p.With = r
				} else {
					p.Without = r
				}
			}
			p.RateRatio = p.With.PerSecond / p.Without.PerSecond
			p.PostgresCPURatio = p.With.PostgresMicros / p.Without.PostgresMicros
			p.ProcessCPURatio = p.With.ProcessMicros / p.Without.ProcessMicros
			logf("  %-20s round %2d: %7.0f/s with, %7.0f/s without (%.3f); PostgreSQL CPU %5.1f / %5.1f µs per event (%.3f); %d entries",
				sc.Name, round+1, p.With.PerSecond, p.Without.PerSecond, p.RateRatio,
				p.With.PostgresMicros, p.Without.PostgresMicros, p.PostgresCPURatio, p.With.Entries)
			sc.Pairs = append(sc.Pairs, p)
		}
		var rate, pg, proc []float64
		logSum := 0.0
		for _, p := range sc.Pairs {
			rate, pg, proc = append(rate, p.RateRatio), append(pg, p.PostgresCPURatio), append(proc, p.ProcessCPURatio)
			logSum += math.Log(p.RateRatio)
		}
		sc.RateRatioGeoMean = math.Exp(logSum / float64(len(sc.Pairs)))
		sc.RateRatio, sc.PostgresCPURatio, sc.ProcessCPURatio = percentile(rate, 0.5), percentile(pg, 0.5), percentile(proc, 0.5)
		sc.RateRatioMin, sc.RateRatioMax = slices.Min(rate), slices.Max(rate)
		sc.Entries = sc.Pairs[0].With.Entries
		logf("  %-20s median of %d pairs: rate %.3f (%.3f … %.3f, geometric mean %.3f), PostgreSQL CPU per event %.3f, this process's %.3f",
			sc.Name, rounds, sc.RateRatio, sc.RateRatioMin, sc.RateRatioMax, sc.RateRatioGeoMean, sc.PostgresCPURatio, sc.ProcessCPURatio)
		res.Scenarios = append(res.Scenarios, sc)
	}
	c, err := historyClaims(ctx, env, n, claims)
	if err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	logf("  claim of %d rows on a backlog of %d: %.3f ms with the history's part, %.3f ms without (median of %d each); extra %.4f ms (paired median; identical statements paired: %.4f ms)",
		c.Rows, c.Backlog, c.WithMS, c.WithoutMS, c.Claims, c.ExtraMS, c.BiasMS)
	res.Claim = c
	return res, nil
}

// historyRun drains a backlog of n rows with the worker pool, failing%
// of them failing their first attempt, with the history or without it.
func historyRun(ctx context.Context, env *environment, n, failing int, with bool) (HistoryRun, error) {
	db, pool, done, err := env.open(ctx, 0)
	if err != nil {
		return HistoryRun{}, err
	}
	defer done()
	if err := insertRows(ctx, pool, "history", n); err != nil {
		return HistoryRun{}, err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE inbox`); err != nil {
		return HistoryRun{}, err
	}
	reg := handlers.NewRegistry()
	var handled atomic.Int64
	allDone := make(chan struct{})
	if err := reg.HandleFunc(eventType, func(_ context.Context, ev *handlers.Event) error {
		// Row ids are consecutive from the backlog's insert: every
		// (100/failing)-th fails once.
		if failing > 0 && ev.Attempt == 1 && ev.ID%int64(100/failing) == 0 {
			return errors.New("http 503")
		}
		if handled.Add(1) == int64(n) {
			close(allDone)
		}
		return nil
	}); err != nil {
		return HistoryRun{}, err
	}
	var opts []engine.Option
	if !with {
		opts = append(opts, engine.WithoutHistory())
	}
	// The defaults, but a failed attempt is retried at once (not in a
	// second): the runs measure the writes, not the backoff.
	cfg := worker.Config{RetryPolicy: worker.ExponentialBackoff{Base: time.Millisecond, Max: time.Millisecond}}
	p, err := engine.New(pool, reg, cfg, zerolog.Nop(), prometheus.NewRegistry(), opts...)
	if err != nil {
		return HistoryRun{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	meter, err := startCPUMeter(ctx, pool, db)
	if err != nil {
		cancel()
		return HistoryRun{}, err
	}
	start := time.Now()
	go func() { stopped <- startstop.Run(runCtx, p) }()
	stopPool := sync.OnceValue(func() error { cancel(); return <-stopped })
	defer stopPool()
	select {
	case <-allDone:
	case err := <-stopped:
		stopped <- err
		return HistoryRun{}, fmt.Errorf("pool stopped: %v", err)
	case <-ctx.Done():
		return HistoryRun{}, ctx.Err()
	case <-time.After(10 * time.Minute):
		return HistoryRun{}, errors.New("not all rows handled after 10 minutes")
	}
	if err := countProcessed(ctx, pool, n); err != nil {
		return HistoryRun{}, err
	}
	el := time.Since(start)
	// The pool's own sessions are counted while they are open: before it
	// stops.
	cpu, err := meter.stop(ctx)
	if err != nil {
		return HistoryRun{}, err
	}
	r := HistoryRun{PerSecond: float64(n) / el.Seconds(),
		PostgresMicros: cpu.Postgres * 1e6 / float64(n), ProcessMicros: cpu.Process * 1e6 / float64(n)}
	if err := stopPool(); err != nil {
		return HistoryRun{}, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM inbox_attempts`).Scan(&r.Entries); err != nil {
		return HistoryRun{}, err
	}
	return r, nil
}

// historyRows is the rows of each timed claim: the pool's default claim.
const historyRows = worker.DefaultClaimBatch

// historyClaims times the claim statement alone on a backlog of n rows,
// claims times with its history's part and as many without, alternating,
// each claim in a transaction rolled back (the backlog stays as it is);
// then as many pairs of the statement without it twice, the pairing's
// own bias.
func historyClaims(ctx context.Context, env *environment, n, claims int) (HistoryClaim, error) {
	c := HistoryClaim{Backlog: n, Rows: historyRows, Claims: claims}
	_, pool, done, err := env.open(ctx, 2)
	if err != nil {
		return c, err
	}
	defer done()
	if err := insertRows(ctx, pool, "claims", n); err != nil {
		return c, err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE inbox`); err != nil {
		return c, err
	}
	params := driver.ClaimParams{
		Limit: historyRows, Rooms: []driver.RouteRoom{{Route: "", Room: historyRows, Idle: historyRows}},
		DefaultOpen: true, MaxBytes: 1 << 30, FirstAlways: true, Token: 1, Lease: time.Minute, Worker: "bench",
		ExpiredPrefix: maintenance.ExpiredPrefix,
	}
	claim := func(noHistory bool) (float64, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		p := params
		p.NoHistory = noHistory
		start := time.Now()
		got, err := driver.Claim(ctx, tx, p)
		el := time.Since(start)
		if err == nil && len(got.Rows) != historyRows {
			err = fmt.Errorf("claimed %d rows, want %d", len(got.Rows), historyRows)
		}
		return float64(el.Nanoseconds()) / 1e6, err
	}
	// pairs times claims pairs of the variants a and b (NoHistory), the
	// order alternating, after 10 pairs of warm-up (plans, caches).
	pairs := func(a, b bool) (as, bs, diffs []float64, err error) {
		for i := range claims + 10 {
			order := [2]bool{a, b}
			if i%2 == 1 {
				order = [2]bool{b, a}
			}
			var t [2]float64
			for k, v := range order {
				if t[k], err = claim(v); err != nil {
					return nil, nil, nil, err
				}
			}
			if i%2 == 1 {
				t[0], t[1] = t[1], t[0]
			}
			if i%20 == 19 {
				// The rolled-back claims leave dead row versions behind,
				// which later claims would step over.
				if _, err := pool.Exec(ctx, `VACUUM inbox`); err != nil {
					return nil, nil, nil, err
				}
			}
			if i >= 10 {
				as, bs, diffs = append(as, t[0]), append(bs, t[1]), append(diffs, t[0]-t[1])
			}
		}
		return as, bs, diffs, nil
	}
	with, without, extra, err := pairs(false, true)
	if err != nil {
		return c, err
	}
	_, _, same, err := pairs(true, true)
	if err != nil {
		return c, err
	}
	c.WithMS, c.WithoutMS, c.ExtraMS = percentile(with, 0.5), percentile(without, 0.5), percentile(extra, 0.5)
	c.BiasMS = percentile(same, 0.5)
	return c, nil
}
