// Command inboxd-bench measures inboxd beside River and a raw-SQL yardstick
// on the same PostgreSQL, and writes the results as JSON and charts.
//
// It runs, one after another, each on a database of its own created on the
// server of INBOXD_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres) and dropped afterwards:
//
//   - raw: the yardstick of the engine's BenchmarkRawPipeline (500-row unnest
//     inserts by a concurrent producer, two consumers making 500-row SKIP
//     LOCKED claims and batched completions, in raw SQL on the inbox table);
//   - river: River (riverqueue/river) tuned for throughput: a no-op worker,
//     FetchCooldown 1 ms, a few hundred workers, jobs inserted with
//     InsertManyFast in 500-job batches by a concurrent producer;
//   - pool: inboxd's worker pool with its defaults on rows inserted by a
//     concurrent producer, as BenchmarkPool;
//   - e2e: the whole daemon in this process (app.Main "run", its default
//     settings, a routes file sending the event type to ignore) consuming a
//     topic of franz-go's kfake through the kafka-go consumer group, Kafka →
//     inbox → workers → processed, as BenchmarkEndToEnd;
//   - retained: the same on an inbox already holding -retained processed
//     rows;
//   - batch: the same daemon with a transactional Go handler that upserts
//     each event into a table of its own, once per row (batch-row) and once
//     per batch of 100 rows (batch-100, a batch route), each on a database
//     of its own: events/s and PostgreSQL CPU per event, the ratios
//     against the target of 3×.
//   - rabbitmq: the same daemon from a durable queue of the run's own on
//     the RabbitMQ server of -amqp-url, deleted afterwards: the -events
//     events published first with publisher confirms (that rate alone, the
//     broker's ceiling, is rabbitmq-publish), then RabbitMQ → inbox →
//     workers → processed, with the default INBOXD_AMQP_PREFETCH and with a
//     prefetch of 1000;
//   - nats: the same from a stream of the run's own (file storage) on the
//     NATS JetStream server of -nats-url, deleted afterwards: the events
//     published first with asynchronous acks (nats-publish, the ceiling),
//     then NATS → inbox → workers → processed through the daemon's durable
//     pull consumer;
//   - outbox: the daemon as a relay only (INBOXD_OUTBOX=true,
//     INBOXD_KAFKA_BROKERS of a kfake cluster, no topics to consume, no
//     routes) publishing -outbox-events rows of 1 KiB over -outbox-keys keys,
//     committed to the outbox table of a fresh database beforehand, timed
//     from app.Main until no row is pending; beside it a raw franz-go
//     producer with the relay's settings (acks=all, idempotent) publishing
//     the same messages from memory to a fresh kfake cluster
//     (outbox-publish, the ceiling); -outbox-runs of each, alternating, the
//     medians recorded. Then -outbox-latency-seconds of a writer committing
//     one row per transaction at -latency-load of the relay's median rate,
//     with a consumer of the topic measuring commit → consumed;
//   - outbox-codecs: the same relay once per INBOXD_OUTBOX_KAFKA_COMPRESSION
//     (none, gzip, snappy), -outbox-events rows of 1 KiB JSON events that
//     vary as real ones do; its rate, and the bytes on the wire per message
//     (the record batches as produced, read back through a fetch hook);
//   - webhook: the daemon with a standard-webhooks source only
//     (INBOXD_WEBHOOK_ADDR, INBOXD_WEBHOOK_SOURCES), warm, taking
//     -webhook-events requests signed beforehand from -webhook-senders
//     concurrent senders in this process, timed from the first request to
//     the last 200 (answered once its row has committed); beside it the same
//     rows from a kfake topic filled beforehand, timed from the first row
//     stored to the last (webhook-kafka); then request latency for
//     -webhook-latency-seconds at -latency-load of the webhook rate, open
//     loop;
//   - latency: the same daemon at fixed offered loads (fractions -loads of
//     the end-to-end maximum measured in the run): p50/p95/p99 from
//     received_at to processed_at and from the Kafka produce time (a
//     produced_at header, RFC 3339 with nanoseconds) to processed_at, and
//     the p99 of the daemon's outcome-write delay over each load (checked
//     below 50 ms at 80 %);
//   - memory: the inboxd binary (go build, no -race) as a subprocess at full
//     rate with 1 KiB payloads and with 1 MiB payloads: its peak RSS
//     (VmHWM);
//   - explain: where the time goes: the top statements of the e2e run
//     (pg_stat_statements, when the server loads it) and EXPLAIN (ANALYZE,
//     BUFFERS) of a claim on a backlog of -events rows;
//   - history (not in the default set; `make bench-history`): what the rows'
//     attempt histories cost: the worker pool draining a backlog of
//     -history-events rows with the history and without it
//     (engine.WithoutHistory), -history-rounds pairs in alternating order,
//     on the happy path and with 10 % of the rows failing their first
//     attempt: the medians of the paired ratios of the rate and of CPU per
//     event; and the claim statement alone with its history part and
//     without (-history-claims each, alternating, rolled back);
//     docs/bench/history/results.json;
//   - long (not in the default set; `make bench-long`): a sustained run at
//     -long-load of the maximum for -long-minutes with retention on
//     (INBOXD_RETENTION -long-retention, INBOXD_RETENTION_INTERVAL 1s), then
//     the same without retention, printing per minute the rate, the p99 and
//     the inbox's size. On a server with autovacuum off (results.json
//     records the setting), -vacuum-every stands in for it.
//
// For raw, pool and e2e it also measures what the run wrote, per event: the
// inbox's inserts, updates and HOT updates (pg_stat_user_tables), the growth
// of the table and of each of its indexes (pg_relation_size; leaf items with
// pgstattuple when the server has it) and the WAL (pg_current_wal_lsn(),
// the server's: the bench is alone on it during `make bench`).
//
// It prints a table with inboxd's ratios to River and to the yardstick and
// the targets, and, with -out, writes results.json, rates.png and
// latency.png (long.json for the long run) to that directory. The machine
// it runs on is usually shared: compare the ratios within one run.
//
// Usage:
//
//	cd cmd/inboxd-bench && go run . -out ../../docs/bench
//	cd cmd/inboxd-bench && go run . -run e2e -cpuprofile cpu.out -blockprofile block.out
//	cd cmd/inboxd-bench && go run . -run long -long-minutes 5
//
// INBOXD_* variables in the environment (INBOXD_WORKERS, …) are passed to
// the daemon and override its defaults, to compare settings.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "inboxd-bench:", err)
		os.Exit(1)
	}
}

// parts are the measurements, in the order they run.
var parts = []string{"raw", "river", "pool", "e2e", "e2e-claimed", "retained", "batch", "rabbitmq", "nats", "outbox", "outbox-codecs", "webhook", "console", "latency", "memory", "explain", "long", "month", "dedup", "history"}

// defaultParts is what runs without -run: everything but the long run.
const defaultParts = "raw,river,pool,e2e,e2e-claimed,retained,batch,rabbitmq,nats,outbox,outbox-codecs,webhook,console,latency,memory,explain"

// options are the parsed flags.
type options struct {
	adminURL string
	amqpURL  string
	natsURL  string
	parts    map[string]bool
	events   int
	retained int

	riverWorkers int
	riverConns   int

	maxRate        float64
	loads          []float64
	latencyLoad    float64
	latencySeconds float64

	outboxEvents         int
	outboxKeys           int
	outboxRuns           int
	outboxLatencySeconds float64

	webhookEvents         int
	consoleRows           int64
	consoleRuns           int
	webhookSenders        int
	webhookLatencySeconds float64

	memEvents    int
	memBigEvents int
	inboxdBin    string

	longMinutes   int
	longLoad      float64
	longRetention time.Duration
	vacuumEvery   time.Duration

	monthMinutes   int
	monthLoad      float64
	monthRetention time.Duration
	monthSpan      time.Duration

	dedupRows int
	dedupHeld int

	historyEvents int
	historyRounds int
	historyClaims int

	out          string
	plot         string
	keep         bool
	cpuProfile   string
	blockProfile string
	mutexProfile string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("inboxd-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	partsFlag := fs.String("run", defaultParts, "comma list of measurements: "+strings.Join(parts, ", "))
	fs.IntVar(&o.events, "events", 100_000, "events per throughput measurement (raw, river, pool, e2e, retained)")
	fs.StringVar(&o.amqpURL, "amqp-url", envOr("INBOXD_TEST_AMQP_URL", defaultAMQPURL), "RabbitMQ server of the rabbitmq measurement (default $INBOXD_TEST_AMQP_URL, else the local server)")
	fs.StringVar(&o.natsURL, "nats-url", envOr("INBOXD_TEST_NATS_URL", defaultNATSURL), "NATS JetStream server of the nats measurement (default $INBOXD_TEST_NATS_URL, else the local server)")
	fs.IntVar(&o.retained, "retained", 2_000_000, "processed rows already in the inbox for the retained measurement")
	fs.IntVar(&o.riverWorkers, "river-workers", 500, "River's MaxWorkers on its one queue")
	fs.IntVar(&o.riverConns, "river-conns", 10, "connections of River's pool (client and producer)")
	fs.Float64Var(&o.maxRate, "max-rate", 0, "end-to-end maximum (events/s) the offered loads are fractions of; 0 = the e2e measurement of this run (made when needed)")
	loadsFlag := fs.String("loads", "0.25,0.5,0.6,0.75,0.8", "offered loads of the latency measurement, as fractions of the maximum (0.8 is where the outcome-write p99 is checked)")
	fs.Float64Var(&o.latencyLoad, "latency-load", 0.5, "the offered load whose p99 is checked against the target (added to -loads when missing)")
	fs.Float64Var(&o.latencySeconds, "latency-seconds", 15, "how long each offered load is produced")
	fs.IntVar(&o.outboxEvents, "outbox-events", 50_000, "outbox rows (1 KiB payloads) of each outbox relay run and raw producer run")
	fs.IntVar(&o.outboxKeys, "outbox-keys", 256, "distinct keys of the outbox rows")
	fs.IntVar(&o.outboxRuns, "outbox-runs", 3, "outbox relay runs and raw producer runs, alternating (the medians are recorded)")
	fs.Float64Var(&o.outboxLatencySeconds, "outbox-latency-seconds", 20, "how long the outbox latency run writes, at -latency-load of the relay's rate; 0 = no latency run")
	fs.IntVar(&o.webhookEvents, "webhook-events", 50_000, "signed requests of the webhook run (and records of the Kafka run beside it)")
	fs.IntVar(&o.webhookSenders, "webhook-senders", 64, "requests in flight during the webhook run")
	fs.Int64Var(&o.consoleRows, "console-rows", 10_000_000, "rows of the console run's inbox (1 % dead, 1 % retrying)")
	fs.IntVar(&o.consoleRuns, "console-runs", 40, "times each listing of the console run is timed (after one warm-up)")
	fs.Float64Var(&o.webhookLatencySeconds, "webhook-latency-seconds", 10, "how long the webhook latency run sends, at -latency-load of the webhook rate; 0 = no latency run")
	fs.IntVar(&o.memEvents, "mem-events", 100_000, "1 KiB events of the memory measurement")
	fs.IntVar(&o.memBigEvents, "mem-big-events", 700, "1 MiB events of the memory measurement")
	fs.StringVar(&o.inboxdBin, "inboxd", "", "inboxd binary for the memory measurement; empty = go build ./cmd/inboxd into a temporary directory")
	fs.IntVar(&o.longMinutes, "long-minutes", 5, "minutes of each sustained run (with and without retention)")
	fs.Float64Var(&o.longLoad, "long-load", 0.8, "offered load of the sustained runs, as a fraction of the maximum")
	fs.DurationVar(&o.longRetention, "long-retention", 5*time.Second, "INBOXD_RETENTION of the sustained run with retention")
	fs.DurationVar(&o.vacuumEvery, "vacuum-every", 0, "in the long runs, VACUUM the inbox this often (from the end of one to the start of the next), standing in for autovacuum when the server has it off; 0 = never")
	fs.IntVar(&o.monthMinutes, "month-minutes", 30, "minutes of the month run (both modes at once)")
	fs.Float64Var(&o.monthLoad, "month-load", 0.8, "offered load of the month run, as a fraction of the maximum measured on its two clusters at once")
	fs.DurationVar(&o.monthRetention, "month-retention", 30*time.Second, "INBOXD_RETENTION of the month run (short: the inbox turns over many times)")
	fs.DurationVar(&o.monthSpan, "month-span", 10*time.Second, "generation span of the month run's partitioned inbox (inboxd partitions convert --span)")
	fs.IntVar(&o.dedupRows, "dedup-rows", 200_000, "new events inserted per shape by the dedup measurement")
	fs.IntVar(&o.dedupHeld, "dedup-held", 1_000_000, "rows the inbox holds (spread over its partitions) before the dedup measurement inserts")
	fs.IntVar(&o.historyEvents, "history-events", 50_000, "backlog each run of the history measurement drains (and the backlog of its timed claims)")
	fs.IntVar(&o.historyRounds, "history-rounds", 20, "pairs of runs (with the history, without) per scenario of the history measurement; 0 = the claim alone")
	fs.IntVar(&o.historyClaims, "history-claims", 300, "claims of each variant (with the history's part, without) the history measurement times")
	fs.StringVar(&o.out, "out", "", "directory for results.json, rates.png and latency.png (long.json for -run long); empty = print only")
	fs.StringVar(&o.plot, "plot", "", "measure nothing: draw the charts of this results.json into -out (default: its directory)")
	fs.BoolVar(&o.keep, "keep", false, "keep the databases for inspection instead of dropping them")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of an extra, profiled end-to-end run to this file")
	fs.StringVar(&o.blockProfile, "blockprofile", "", "write a blocking profile of an extra, profiled end-to-end run to this file")
	fs.StringVar(&o.mutexProfile, "mutexprofile", "", "write a mutex profile of an extra, profiled end-to-end run to this file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.parts = map[string]bool{}
	for _, p := range strings.Split(*partsFlag, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(parts, p) {
			return nil, fmt.Errorf("-run: unknown measurement %q (known: %s)", p, strings.Join(parts, ", "))
		}
		o.parts[p] = true
	}
	for _, s := range strings.Split(*loadsFlag, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f <= 0 || f > 1.5 {
			return nil, fmt.Errorf("-loads: %q is not a fraction in (0, 1.5]", s)
		}
		o.loads = append(o.loads, f)
	}
	if !slices.Contains(o.loads, o.latencyLoad) {
		o.loads = append(o.loads, o.latencyLoad)
	}
	slices.Sort(o.loads)
	switch {
	case o.events < 1000:
		return nil, errors.New("-events must be at least 1000")
	case o.outboxEvents < 1000 || o.outboxKeys < 1 || o.outboxRuns < 1:
		return nil, errors.New("-outbox-events must be at least 1000, -outbox-keys and -outbox-runs positive")
	case o.outboxLatencySeconds != 0 && o.outboxLatencySeconds < 1:
		return nil, errors.New("-outbox-latency-seconds must be 0 or at least 1")
	case o.webhookEvents < 1000 || o.webhookSenders < 1:
		return nil, errors.New("-webhook-events must be at least 1000, -webhook-senders positive")
	case o.webhookLatencySeconds != 0 && o.webhookLatencySeconds < 1:
		return nil, errors.New("-webhook-latency-seconds must be 0 or at least 1")
	case o.consoleRows < 10_000 || o.consoleRuns < 1:
		return nil, errors.New("-console-rows must be at least 10000, -console-runs positive")
	case o.latencySeconds < 1:
		return nil, errors.New("-latency-seconds must be at least 1")
	case o.longMinutes < 1:
		return nil, errors.New("-long-minutes must be at least 1")
	case o.longRetention < time.Second:
		return nil, errors.New("-long-retention must be at least 1s (inboxd's minimum)")
	case o.historyEvents < 1000 || o.historyRounds < 0 || o.historyClaims < 1:
		return nil, errors.New("-history-events must be at least 1000, -history-rounds at least 0, -history-claims positive")
	case o.riverWorkers < 1 || o.riverConns < 2:
		return nil, errors.New("-river-workers must be positive and -river-conns at least 2")
	}
	o.adminURL = os.Getenv("INBOXD_TEST_DATABASE_URL")
	if o.adminURL == "" {
		o.adminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	return o, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	if o.plot != "" {
		if strings.HasSuffix(o.plot, "month.json") {
			return replotMonth(o.plot, o.out)
		}
		return replot(o.plot, o.out)
	}
	if err := checkBrokers(o); err != nil {
		return err
	}
	env, err := newEnvironment(ctx, o.adminURL)
	if err != nil {
		return err
	}
	env.keep = o.keep
	defer env.close()

	res := &Results{
		GeneratedAt: time.Now().UTC().Truncate(time.Second),
		Machine: Machine{
			CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
			Go: runtime.Version(), PostgreSQL: env.serverVersion, Autovacuum: env.autovacuum, Commit: gitCommit(),
			LoadAverageStart: loadAverage(),
		},
		Events: o.events,
		Settings: Settings{
			RiverWorkers: o.riverWorkers, RiverConns: o.riverConns, RiverFetchCooldownMS: 1,
			RiverFetchPollIntervalMS: riverFetchPollInterval.Milliseconds(), InsertBatch: insertBatch,
			Retained: o.retained, DaemonEnv: daemonOverrides(),
		},
	}
	logf := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }
	logf("inboxd-bench: %d events per measurement, %d CPUs (load average %.2f), %s, %s, commit %s",
		o.events, res.Machine.CPUs, res.Machine.LoadAverageStart, res.Machine.Go, shortVersion(env.serverVersion), res.Machine.Commit)
	logf("(a shared machine is noisy: compare the ratios within one run)")
	if env.autovacuum != "on" {
		logf("NOTE: the server runs with autovacuum = %s: nothing vacuums the inbox while a run lasts (see -vacuum-every for the long runs)", env.autovacuum)
	}

	measure := func(name string, f func() (Rate, error)) error {
		if !o.parts[name] {
			return nil
		}
		logf("… %s", name)
		r, err := f()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		logf("  %-9s %9.0f events/s  (%d events in %.2fs%s)", name, r.PerSecond, r.Events, r.Seconds, r.note())
		res.Rates = append(res.Rates, r)
		return nil
	}
	steps := []struct {
		name string
		f    func() (Rate, error)
	}{
		{"raw", func() (Rate, error) { return benchRaw(ctx, env, o.events) }},
		{"river", func() (Rate, error) { return benchRiver(ctx, env, o.events, o.riverWorkers, o.riverConns) }},
		{"pool", func() (Rate, error) { return benchPool(ctx, env, o.events) }},
		{"e2e", func() (Rate, error) { return benchEndToEnd(ctx, env, o.events, 0, profiles{}, false) }},
		{"e2e-claimed", func() (Rate, error) { return benchEndToEnd(ctx, env, o.events, 0, profiles{}, true) }},
		{"retained", func() (Rate, error) { return benchEndToEnd(ctx, env, o.events, o.retained, profiles{}, false) }},
	}
	brokers := []struct {
		name string
		f    func() ([]Rate, error)
	}{
		{"batch", func() ([]Rate, error) { return benchBatchRuns(ctx, env, o.events) }},
		{"rabbitmq", func() ([]Rate, error) { return benchRabbitMQRuns(ctx, env, o.amqpURL, o.events) }},
		{"nats", func() ([]Rate, error) { return benchNATSRuns(ctx, env, o.natsURL, o.events) }},
	}
	for _, s := range steps {
		var stmts *statementsMeter
		if s.name == "e2e" && o.parts["explain"] && o.parts["e2e"] {
			stmts = startStatements(ctx, env)
		}
		if err := measure(s.name, s.f); err != nil {
			return err
		}
		if stmts != nil {
			top, err := stmts.top(ctx, 6, int64(o.events/10))
			if err != nil {
				return fmt.Errorf("pg_stat_statements: %w", err)
			}
			res.Diagnosis = &Diagnosis{Statements: top, StatementsNote: stmts.note}
		}
	}
	for _, b := range brokers {
		if !o.parts[b.name] {
			continue
		}
		logf("… %s", b.name)
		rs, err := b.f()
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		for _, r := range rs {
			logf("  %-21s %9.0f events/s  (%d events in %.2fs%s)", r.Name, r.PerSecond, r.Events, r.Seconds, r.note())
		}
		res.Rates = append(res.Rates, rs...)
	}
	if o.parts["outbox"] {
		logf("… outbox (%d rows of %d bytes over %d keys, %d runs each)", o.outboxEvents, outboxPayloadBytes, o.outboxKeys, o.outboxRuns)
		rs, ob, err := benchOutboxRuns(ctx, env, o.outboxEvents, o.outboxKeys, o.outboxRuns, o.latencyLoad,
			time.Duration(o.outboxLatencySeconds*float64(time.Second)), logf)
		if err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
		for _, r := range rs {
			logf("  %-21s %9.0f msg/s  (median of %d: %d messages in %.2fs%s)", r.Name, r.PerSecond, o.outboxRuns, r.Events, r.Seconds, r.note())
		}
		res.Rates = append(res.Rates, rs...)
		res.Outbox = ob
		if len(res.Rates) == len(rs) {
			res.Events = o.outboxEvents // the charts' title: the outbox's are the only rates
		}
	}
	if o.parts["outbox-codecs"] {
		logf("… outbox codecs (%s: %d rows of %d-byte JSON events over %d keys, one run each)",
			strings.Join(outboxCodecs, ", "), o.outboxEvents, outboxPayloadBytes, o.outboxKeys)
		runs, err := benchOutboxCodecs(ctx, env, o.outboxEvents, o.outboxKeys, logf)
		if err != nil {
			return fmt.Errorf("outbox codecs: %w", err)
		}
		res.OutboxCodecs = runs
	}
	if o.parts["webhook"] {
		logf("… webhook (%d signed requests, %d senders, beside the same rows from Kafka)", o.webhookEvents, o.webhookSenders)
		rs, wh, err := benchWebhookRuns(ctx, env, o.webhookEvents, o.webhookSenders, o.latencyLoad,
			time.Duration(o.webhookLatencySeconds*float64(time.Second)), logf)
		if err != nil {
			return fmt.Errorf("webhook: %w", err)
		}
		res.Rates = append(res.Rates, rs...)
		res.Webhook = wh
		if len(res.Rates) == len(rs) {
			res.Events = o.webhookEvents // the charts' title: the webhook's are the only rates
		}
	}
	if o.parts["console"] {
		logf("… console (every ops listing on an inbox of %d rows, %d runs each)", o.consoleRows, o.consoleRuns)
		c, err := benchConsole(ctx, env, o.consoleRows, o.consoleRuns, logf)
		if err != nil {
			return fmt.Errorf("console: %w", err)
		}
		res.Console = c
	}
	if o.parts["explain"] {
		logf("… explain (the claim on a backlog of %d rows)", o.events)
		plan, err := explainClaim(ctx, env, o.events)
		if err != nil {
			return fmt.Errorf("explain: %w", err)
		}
		if res.Diagnosis == nil {
			res.Diagnosis = &Diagnosis{}
		}
		res.Diagnosis.ClaimPlan, res.Diagnosis.BacklogRows = plan, o.events
	}

	if prof := (profiles{cpu: o.cpuProfile, block: o.blockProfile, mutex: o.mutexProfile}); prof != (profiles{}) {
		logf("… e2e, profiled (not counted)")
		r, err := benchEndToEnd(ctx, env, o.events, 0, prof, false)
		if err != nil {
			return fmt.Errorf("profiled e2e: %w", err)
		}
		logf("  profiled  %9.0f events/s%s", r.PerSecond, r.note())
	}

	maxRate := func() (float64, error) {
		if o.maxRate > 0 {
			return o.maxRate, nil
		}
		if r, ok := res.rate("e2e"); ok {
			return r.PerSecond, nil
		}
		logf("… e2e (for the maximum the offered loads are fractions of; not in the rates)")
		r, err := benchEndToEnd(ctx, env, o.events, 0, profiles{}, false)
		if err != nil {
			return 0, fmt.Errorf("e2e: %w", err)
		}
		logf("  e2e       %9.0f events/s", r.PerSecond)
		o.maxRate = r.PerSecond // once for the latency and the long runs
		return r.PerSecond, nil
	}

	if o.parts["latency"] {
		m, err := maxRate()
		if err != nil {
			return err
		}
		logf("… latency at %v of %.0f events/s, %.0fs each", o.loads, m, o.latencySeconds)
		lat, err := benchLatency(ctx, env, m, o.loads, o.latencyLoad, time.Duration(o.latencySeconds*float64(time.Second)), logf)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		res.Latency = lat
	}
	if o.parts["memory"] {
		logf("… memory")
		mem, err := benchMemory(ctx, env, o.inboxdBin, o.memEvents, o.memBigEvents, logf)
		if err != nil {
			return fmt.Errorf("memory: %w", err)
		}
		res.Memory = mem
	}
	var long *LongResults
	if o.parts["long"] {
		m, err := maxRate()
		if err != nil {
			return err
		}
		long, err = benchLong(ctx, env, m, o.longLoad, o.longMinutes, o.longRetention, o.vacuumEvery, logf)
		if err != nil {
			return fmt.Errorf("long: %w", err)
		}
	}

	if o.parts["dedup"] {
		logf("… dedup: the cost per insert of exact deduplication across partitions (%d new events and redeliveries, %d rows held, %d connections, batches of %d)",
			o.dedupRows, o.dedupHeld, dedupConns, dedupBatch)
		dd, err := benchDedup(ctx, env, o.dedupRows, o.dedupHeld, res.Machine, logf)
		if err != nil {
			return fmt.Errorf("dedup: %w", err)
		}
		if o.out != "" {
			if err := writeJSON(o.out, "dedup.json", dd); err != nil {
				return err
			}
		}
		if len(o.parts) == 1 {
			return nil
		}
	}
	if o.parts["history"] {
		logf("… history: the rows' attempt histories, with and without (%d rounds of a %d-row backlog per scenario, %d timed claims each way)",
			o.historyRounds, o.historyEvents, o.historyClaims)
		h, err := benchHistory(ctx, env, o.historyEvents, o.historyRounds, o.historyClaims, res.Machine, logf)
		if err != nil {
			return fmt.Errorf("history: %w", err)
		}
		h.Machine.LoadAverageEnd = loadAverage()
		if o.out != "" {
			if err := writeJSON(filepath.Join(o.out, "history"), "results.json", h); err != nil {
				return err
			}
		}
		if len(o.parts) == 1 {
			return nil
		}
	}
	if o.parts["month"] {
		month, err := benchMonth(ctx, o.maxRate, o.monthLoad, o.monthMinutes, o.monthRetention, o.monthSpan, o.events, res.Machine, logf)
		if err != nil {
			return fmt.Errorf("month: %w", err)
		}
		month.Machine.LoadAverageEnd = loadAverage()
		if o.out != "" {
			if err := writeMonth(o.out, month); err != nil {
				return err
			}
			logf("month results written to %s", o.out)
		}
		if len(o.parts) == 1 {
			return nil
		}
	}

	res.Machine.LoadAverageEnd = loadAverage()
	if long != nil {
		long.GeneratedAt, long.Machine = res.GeneratedAt, res.Machine
	}
	res.evaluate()
	printResults(out, res, long)
	if res.Diagnosis != nil {
		printDiagnosis(out, res.Diagnosis)
	}
	logf("load average %.2f at the start, %.2f at the end (%d CPUs)", res.Machine.LoadAverageStart, res.Machine.LoadAverageEnd, res.Machine.CPUs)
	if o.out != "" {
		if err := writeResults(o.out, res, long); err != nil {
			return err
		}
		logf("results written to %s", o.out)
	}
	return nil
}

// daemonOverrides returns the INBOXD_* variables of the environment that
// the in-process daemon takes over its defaults (the benchmark's own
// INBOXD_TEST_* and INBOXD_BENCH_* excepted).
func daemonOverrides() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "INBOXD_") && !strings.HasPrefix(kv, "INBOXD_TEST_") && !strings.HasPrefix(kv, "INBOXD_BENCH_") {
			out = append(out, kv)
		}
	}
	return out
}

// shortVersion is "PostgreSQL 15.20" out of version()'s long text.
func shortVersion(v string) string {
	f := strings.Fields(v)
	if len(f) >= 2 {
		return f[0] + " " + f[1]
	}
	return v
}
