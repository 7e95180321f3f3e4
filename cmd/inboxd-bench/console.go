package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/internal/ops"
)

// consoleTarget is issue 28's bound on every console page and CLI listing
// at the 95th percentile, on an inbox of ten million rows.
const consoleTarget = 200 * time.Millisecond

// ConsoleResults is the console measurement (-run console): every listing
// the console and the CLI read through internal/ops, on a large inbox.
type ConsoleResults struct {
	// Rows is the inbox's size; Dead and Retrying its dead and retrying
	// rows (1 % each), the rest processed but for a few live ones.
	Rows     int64 `json:"rows"`
	Dead     int64 `json:"dead"`
	Retrying int64 `json:"retrying"`
	// BuildSeconds is how long filling the inbox took (INSERT … SELECT
	// generate_series, then ANALYZE).
	BuildSeconds float64 `json:"build_seconds"`
	// Runs is how many times each query ran (after one warm-up).
	Runs int `json:"runs"`
	// Queries are the figures of each query, in the order they ran.
	Queries []ConsoleQuery `json:"queries"`
	// RollupFlushMS is the time of one rollup round adding routes × 2 cells
	// (a minute and an hour per route), the rollup's cost per replica and
	// round (every 10 s).
	RollupFlushMS float64 `json:"rollup_flush_ms"`
	// RollupCells is how many cells that round wrote.
	RollupCells int `json:"rollup_cells"`
	// JITOn are the same queries (fewer runs) on sessions with JIT
	// compilation on, the server's default: config.PoolConfig turns it
	// off.
	JITOn []ConsoleQuery `json:"jit_on"`
	// TargetMS is the bound; AllUnder whether every query's p95 is below it.
	TargetMS float64 `json:"target_ms"`
	AllUnder bool    `json:"all_under"`
}

// ConsoleQuery is one query's latency over the runs.
type ConsoleQuery struct {
	Name  string  `json:"name"`
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	MaxMS float64 `json:"max_ms"`
	// Rows is how many rows (or entries) its last run returned.
	Rows int `json:"rows"`
}

// consoleRoutes are the event types of the large inbox.
var consoleRoutes = []string{"order.created", "order.paid", "order.shipped", "payment.captured", "payment.refunded",
	"user.signed_up", "user.deleted", "invoice.sent", "invoice.paid", "stock.changed"}

// buildLargeInbox fills the inbox of pool with rows rows: 98 % processed
// over the last week, 1 % dead, 1 % received with attempts used (in
// backoff), plus a few thousand waiting, parked and processing ones; ten
// event types over three sources, keyed, with small payloads. It writes in
// chunks of a million rows (INSERT … SELECT generate_series), then
// VACUUMs and ANALYZEs it.
func buildLargeInbox(ctx context.Context, pool *pgxpool.Pool, rows int64, logf func(string, ...any)) error {
	const chunk = 1_000_000
	for from := int64(1); from <= rows; from += chunk {
		to := min(from+chunk-1, rows)
		_, err := pool.Exec(ctx, `
INSERT INTO inbox (source, event_id, event_type, key, payload, status, attempts, available_at, last_error,
                   received_at, processed_at, updated_at)
SELECT (ARRAY['orders', 'payments-queue', 'users-stream'])[1 + g % 3],
       'ev-' || g,
       ($3::text[])[1 + (g + g / 100) % 10],
       convert_to('key-' || (g % 50000), 'UTF8'),
       '\x7b7d'::bytea,
       CASE WHEN g % 100 = 0 THEN 'dead' WHEN g % 100 = 1 THEN 'received' ELSE 'processed' END,
       CASE WHEN g % 100 = 0 THEN 25 WHEN g % 100 = 1 THEN 1 + g % 20 ELSE 1 END,
       CASE WHEN g % 100 = 1 THEN now() + (g % 3600) * interval '1 second' ELSE now() END,
       CASE WHEN g % 100 = 0 THEN 'attempt 25 of 25: http ' || (500 + (g / 100) % 4)
            WHEN g % 100 = 1 THEN 'attempt ' || (1 + g % 20) || ' of 25: http 503' END,
       now() - (($2::bigint - g) * interval '60 millisecond'),
       CASE WHEN g % 100 > 1 THEN now() - (($2::bigint - g) * interval '60 millisecond') + interval '40 millisecond' END,
       now() - (($2::bigint - g) * interval '60 millisecond')
FROM generate_series($1::bigint, $4::bigint) AS g`, from, rows, consoleRoutes, to)
		if err != nil {
			return fmt.Errorf("fill rows %d to %d: %w", from, to, err)
		}
		logf("  %d of %d rows", to, rows)
	}
	// A few live rows of every other view: waiting (due), parked behind a
	// dead head, processing.
	_, err := pool.Exec(ctx, `
INSERT INTO inbox (source, event_id, event_type, key, status, available_at, attempts, lease_token, lease_expires_at, locked_by)
SELECT 'orders', 'live-' || g, 'order.created', convert_to('key-' || (g % 50000), 'UTF8'),
       CASE WHEN g % 3 = 2 THEN 'processing' ELSE 'received' END,
       CASE WHEN g % 3 = 1 THEN '9999-12-31 00:00:00+00'::timestamptz ELSE now() END,
       CASE WHEN g % 3 = 2 THEN 1 ELSE 0 END,
       CASE WHEN g % 3 = 2 THEN g END,
       CASE WHEN g % 3 = 2 THEN now() + interval '1 minute' END,
       CASE WHEN g % 3 = 2 THEN 'bench-worker' END
FROM generate_series(1, 3000) AS g`)
	if err != nil {
		return fmt.Errorf("fill live rows: %w", err)
	}
	// What autovacuum does on a live server (this one may run with it
	// off): the visibility map lets the counts read their indexes alone.
	_, err = pool.Exec(ctx, "VACUUM (ANALYZE) inbox")
	return err
}

// fillRollup writes a week of the rollup for the console's routes: a cell
// per route and minute for two days, per hour for eight, as the
// maintenance of a busy fleet leaves it.
func fillRollup(ctx context.Context, pool *pgxpool.Pool) error {
	n := len(maintenance.LatencyBounds) + 1
	_, err := pool.Exec(ctx, `
INSERT INTO route_rollup (span, at, route, processed, retried, dead, latency_buckets)
SELECT s.span, date_trunc('minute', now()) - g * s.span * interval '1 second', r, 1000 + g % 97, g % 7, g % 3,
       array_fill(10::bigint, ARRAY[$2::int])
FROM (VALUES (60, 2 * 1440), (3600, 8 * 24)) AS s(span, cells),
     unnest($1::text[]) AS r,
     LATERAL generate_series(0, s.cells - 1) AS g`, consoleRoutes, n)
	return err
}

// benchConsole builds a large inbox and times every listing of
// internal/ops that the console's pages and the CLI's listings run.
func benchConsole(ctx context.Context, env *environment, rows int64, runs int, logf func(string, ...any)) (*ConsoleResults, error) {
	db, err := env.newDatabase(ctx)
	if err != nil {
		return nil, err
	}
	defer env.drop(db)
	// The daemon's and the CLI's session settings (config.PoolConfig: JIT
	// off among them).
	pc, err := config.Config{DatabaseURL: db.url}.PoolConfig("inboxd-bench-console", 4)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	res := &ConsoleResults{Rows: rows, Dead: rows / 100, Retrying: rows / 100, Runs: runs, TargetMS: float64(consoleTarget.Milliseconds())}
	start := time.Now()
	logf("  filling an inbox of %d rows", rows)
	if err := buildLargeInbox(ctx, pool, rows, logf); err != nil {
		return nil, err
	}
	if err := fillRollup(ctx, pool); err != nil {
		return nil, err
	}
	res.BuildSeconds = time.Since(start).Seconds()
	logf("  filled in %.0fs", res.BuildSeconds)

	o := ops.New(ops.Config{DB: pool, MaxAttempts: func(string) int { return 25 }, Lease: 30 * time.Second})
	op := ops.Operator{Name: "bench", From: "inboxd-bench"}
	for i := range 200 { // an audit trail to page
		if err := o.Record(ctx, op, ops.ActSignIn, fmt.Sprintf("session %d", i)); err != nil {
			return nil, err
		}
	}
	res.AllUnder = true
	timed, err := timeQueries(consoleQueries(ctx, o, pool, rows), runs, logf)
	if err != nil {
		return nil, err
	}
	res.Queries = timed
	for _, cq := range timed {
		if cq.P95MS >= res.TargetMS {
			res.AllUnder = false
		}
	}
	// The same queries with JIT compilation on (the server's default):
	// what config.PoolConfig's jit=off saves, in this run.
	jc := pc.Copy()
	jc.ConnConfig.RuntimeParams["jit"] = "on"
	jpool, err := pgxpool.NewWithConfig(ctx, jc)
	if err != nil {
		return nil, err
	}
	defer jpool.Close()
	jo := ops.New(ops.Config{DB: jpool, MaxAttempts: func(string) int { return 25 }, Lease: 30 * time.Second})
	logf("  again with jit on, %d runs each", max(runs/4, 5))
	if res.JITOn, err = timeQueries(consoleQueries(ctx, jo, jpool, rows), max(runs/4, 5), logf); err != nil {
		return nil, err
	}

	// One rollup round of a busy replica: every route's minute and hour.
	tally := maintenance.NewTally()
	now := time.Now()
	for _, r := range consoleRoutes {
		tally.Add(now, maintenance.Outcome{Route: r, Processed: true, Latency: 3 * time.Millisecond}, maintenance.Outcome{Route: r, Retried: true})
	}
	cells := 2 * len(consoleRoutes)
	rollup := maintenance.NewRollup(pool, tally, time.Hour, zerolog.Nop(), nil)
	t := time.Now()
	if err := rollup.Flush(ctx); err != nil {
		return nil, err
	}
	res.RollupFlushMS, res.RollupCells = float64(time.Since(t).Microseconds())/1000, cells
	logf("  rollup round of %d cells: %.1f ms", cells, res.RollupFlushMS)
	return res, nil
}

// consoleQuery is one timed query: its name and a run of it, returning
// how many rows (or entries) it read.
type consoleQuery struct {
	name string
	f    func() (int, error)
}

// consoleQueries are the queries of the console's pages and the CLI's
// listings, through o (and pool, for the driver's own), on the large inbox
// of rows rows.
func consoleQueries(ctx context.Context, o *ops.Ops, pool *pgxpool.Pool, rows int64) []consoleQuery {
	page := func(v ops.View, f ops.Filter) func() (int, error) {
		return func() (int, error) {
			p, err := o.List(ctx, ops.ListQuery{View: v, Filter: f})
			return len(p.Rows), err
		}
	}
	second := func(v ops.View, f ops.Filter) func() (int, error) {
		return func() (int, error) {
			p, err := o.List(ctx, ops.ListQuery{View: v, Filter: f})
			if err != nil || p.Next == "" {
				return 0, err
			}
			p, err = o.List(ctx, ops.ListQuery{View: v, Filter: f, After: p.Next})
			return len(p.Rows), err
		}
	}
	hourAgo := time.Now().Add(-time.Hour)
	queries := []consoleQuery{
		{"overview counts (driver.ReadStats)", func() (int, error) {
			_, err := driver.ReadStats(ctx, pool, 5*time.Minute)
			return 1, err
		}},
	}
	for _, v := range ops.Views() {
		queries = append(queries, consoleQuery{"list " + string(v), page(v, ops.Filter{})})
	}
	more := []consoleQuery{
		{"list dead, two pages", second(ops.ViewDead, ops.Filter{})},
		{"list dead by route", page(ops.ViewDead, ops.Filter{EventType: "payment.captured"})},
		{"list dead by source", page(ops.ViewDead, ops.Filter{Source: "payments-queue"})},
		{"list dead by error text", page(ops.ViewDead, ops.Filter{Error: "http 502"})},
		{"list dead by error text matching none", page(ops.ViewDead, ops.Filter{Error: "no such error"})},
		{"list dead by key", page(ops.ViewDead, ops.Filter{Key: []byte("key-4200")})},
		{"list dead since an hour", page(ops.ViewDead, ops.Filter{Since: &hourAgo})},
		{"list retrying by route", page(ops.ViewRetrying, ops.Filter{EventType: "order.paid"})},
		{"list retrying by error text", page(ops.ViewRetrying, ops.Filter{Error: "of 25: http 503"})},
		{"list retrying, two pages", second(ops.ViewRetrying, ops.Filter{})},
		{"list processed by route", page(ops.ViewProcessed, ops.Filter{EventType: "invoice.paid"})},
		{"list processed, two pages", second(ops.ViewProcessed, ops.Filter{})},
		{"list waiting by key", page(ops.ViewWaiting, ops.Filter{Key: []byte("key-7")})},
		{"list dead by key and source", page(ops.ViewDead, ops.Filter{Key: []byte("key-4200"), Source: "orders"})},
		{"list retrying by key", page(ops.ViewRetrying, ops.Filter{Key: []byte("key-4201")})},
		{"list processed by key", page(ops.ViewProcessed, ops.Filter{Key: []byte("key-7")})},
		{"show: find an event id (driver.FindEvent)", func() (int, error) {
			r, err := driver.FindEvent(ctx, pool, fmt.Sprintf("ev-%d", rows/2))
			return len(r), err
		}},
		{"show: a row's history", func() (int, error) {
			h, err := o.History(ctx, rows/2)
			return len(h), err
		}},
		{"throughput, last hour", throughputQuery(ctx, o, ops.WindowHour)},
		{"throughput, last day", throughputQuery(ctx, o, ops.WindowDay)},
		{"throughput, last week", throughputQuery(ctx, o, ops.WindowWeek)},
		{"audit trail, first page", func() (int, error) {
			a, err := o.Audit(ctx, ops.AuditQuery{Limit: 50})
			return len(a), err
		}},
		{"audit trail by operator", func() (int, error) {
			a, err := o.Audit(ctx, ops.AuditQuery{Limit: 50, Operator: "bench"})
			return len(a), err
		}},
		{"route pause check (driver.RouteKnown)", func() (int, error) {
			ok, err := driver.RouteKnown(ctx, pool, "order.nonexistent")
			if ok {
				return 1, err
			}
			return 0, err
		}},
	}
	queries = append(queries, more...)
	return queries
}

// timeQueries times each query runs times after one warm-up, one after
// another.
func timeQueries(queries []consoleQuery, runs int, logf func(string, ...any)) ([]ConsoleQuery, error) {
	var out []ConsoleQuery
	for _, q := range queries {
		var times []float64
		var n int
		for i := 0; i <= runs; i++ {
			t := time.Now()
			got, err := q.f()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", q.name, err)
			}
			if i > 0 { // the first is the warm-up
				times = append(times, float64(time.Since(t).Microseconds())/1000)
			}
			n = got
		}
		slices.Sort(times)
		cq := ConsoleQuery{Name: q.name, P50MS: percentile(times, 0.5), P95MS: percentile(times, 0.95), MaxMS: times[len(times)-1], Rows: n}
		out = append(out, cq)
		logf("  %-44s p50 %7.1f ms  p95 %7.1f ms  max %7.1f ms  (%d rows)", q.name, cq.P50MS, cq.P95MS, cq.MaxMS, n)
	}
	return out, nil
}

func throughputQuery(ctx context.Context, o *ops.Ops, w ops.Window) func() (int, error) {
	return func() (int, error) {
		s, err := o.Throughput(ctx, w, "")
		n := 0
		for _, r := range s {
			n += len(r.Points)
		}
		return n, err
	}
}
