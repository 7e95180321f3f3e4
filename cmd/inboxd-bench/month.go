package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"

	inboxparts "github.com/inboxd/inboxd/internal/partitions"
)

// The month run: a month of operation compressed into a sustained run.
// Two PostgreSQL clusters of its own (initdb and pg_ctl into a temporary
// directory, autovacuum on as in production), one per retention mode:
// DELETE retention on one, partition retention (`inboxd partitions
// convert`) on the other. Both daemons run at once at the same offered
// rate, side by side under the same noise of the shared machine, with a
// retention short enough that the inbox turns over many times.

// MonthResults is what -run month measured (docs/bench/month.json).
type MonthResults struct {
	GeneratedAt time.Time `json:"generated_at"`
	Machine     Machine   `json:"machine"`
	// MaxRate is the end-to-end maximum (events/s) measured on both
	// clusters at once (the lower of the two), before the run.
	MaxRate float64 `json:"max_rate"`
	// MaxRates are each mode's maximum in that measurement.
	MaxRates map[string]float64 `json:"max_rates"`
	// Load is the offered fraction of MaxRate, Offered the rate itself.
	Load    float64 `json:"load"`
	Offered float64 `json:"offered"`
	// Minutes is the length of each run; both ran at once.
	Minutes int `json:"minutes"`
	// Retention is INBOXD_RETENTION of both; Span the partitions'
	// generation span.
	Retention string `json:"retention"`
	Span      string `json:"span"`
	// ClusterSettings are the clusters' non-default settings.
	ClusterSettings []string   `json:"cluster_settings"`
	Runs            []MonthRun `json:"runs"`
}

// MonthRun is one mode's run.
type MonthRun struct {
	// Mode is delete or partitions.
	Mode    string        `json:"mode"`
	Minutes []MonthMinute `json:"minutes"`
	// Produced is how many events were produced.
	Produced int `json:"produced"`
	// ProcessedPerSecond is over the whole run.
	ProcessedPerSecond float64 `json:"processed_per_second"`
	// Drained is whether every event was processed within the drain limit.
	Drained      bool    `json:"drained"`
	DrainSeconds float64 `json:"drain_seconds"`
	// RetentionDeleted is inboxd_retention_deleted_rows_total{status=processed}
	// at the end: rows retention deleted.
	RetentionDeleted float64 `json:"retention_deleted"`
	// FirstVsLast compare the mean of the last 5 minutes with the first 5
	// (last / first).
	RateLastOverFirst float64 `json:"rate_last_over_first"`
	P99LastOverFirst  float64 `json:"p99_last_over_first"`
	SizeLastOverFirst float64 `json:"size_last_over_first"`
	// WALBytesPerEvent and CPUMSPerEvent are over the whole run.
	WALBytesPerEvent float64 `json:"wal_bytes_per_event"`
	CPUMSPerEvent    float64 `json:"cpu_ms_per_event"`
	// AutovacuumSeconds is autovacuum worker time over the run (sampled
	// every second in pg_stat_activity).
	AutovacuumSeconds float64 `json:"autovacuum_seconds"`
	// Error, when set, says why the run stopped early.
	Error string `json:"error,omitempty"`
}

// MonthMinute is one minute of one mode's run.
type MonthMinute struct {
	Minute                   int     `json:"minute"`
	ProcessedPerSecond       float64 `json:"processed_per_second"`
	ReceivedToProcessedP99MS float64 `json:"received_to_processed_p99_ms"`
	// InboxBytes is the inbox's size with its partitions and indexes.
	InboxBytes int64 `json:"inbox_bytes"`
	// Partitions is how many partitions the inbox has (0: one table).
	Partitions int   `json:"partitions"`
	Backlog    int64 `json:"backlog"`
	// DeadTuples is n_dead_tup of the inbox (its partitions summed).
	DeadTuples int64 `json:"dead_tuples"`
	// RetentionDeletedPerSecond is retention's DELETEs of processed rows.
	RetentionDeletedPerSecond float64 `json:"retention_deleted_per_second"`
	// WALBytesPerEvent is the cluster's WAL written in the minute over the
	// events processed in it.
	WALBytesPerEvent float64 `json:"wal_bytes_per_event"`
	// CPUMSPerEvent is the cluster's PostgreSQL processes' CPU time (ms)
	// over the events processed.
	CPUMSPerEvent float64 `json:"cpu_ms_per_event"`
	// AutovacuumSeconds is autovacuum worker time in the minute (sampled
	// every second), AutovacuumRuns the runs seen starting.
	AutovacuumSeconds float64 `json:"autovacuum_seconds"`
	AutovacuumRuns    int     `json:"autovacuum_runs"`
}

// cluster is a PostgreSQL cluster the bench started.
type cluster struct {
	dir, bin string
	port     int
	cred     *syscall.Credential // run its programs as postgres when the bench is root
	url      string
}

// clusterSettings are the month clusters' settings: autovacuum on, as in
// production, and PostgreSQL's defaults otherwise, but for the memory
// and connections two clusters on a small shared machine afford.
var clusterSettings = []string{
	"autovacuum=on", "shared_buffers=128MB", "max_connections=200",
	"listen_addresses=127.0.0.1", "log_autovacuum_min_duration=-1",
}

// pgBin finds initdb and pg_ctl: $INBOXD_BENCH_PG_BIN, the PATH, or
// pg_config --bindir.
func pgBin() (string, error) {
	if d := os.Getenv("INBOXD_BENCH_PG_BIN"); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		return "", errors.New("initdb not found: set INBOXD_BENCH_PG_BIN to PostgreSQL's bin directory")
	}
	return strings.TrimSpace(string(out)), nil
}

// startCluster initdbs a cluster into a temporary directory and starts it
// on a free port.
func startCluster(ctx context.Context, name string) (*cluster, error) {
	bin, err := pgBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "inboxd-month-"+name+"-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, bin: bin}
	if os.Geteuid() == 0 { // initdb refuses root
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root: initdb needs a user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	data := filepath.Join(dir, "data")
	if err := c.run(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, err
	}
	opts := "-p " + strconv.Itoa(c.port) + " -k " + dir
	for _, s := range clusterSettings {
		opts += " -c " + s
	}
	if err := c.run(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-o", opts, "start"); err != nil {
		return nil, err
	}
	c.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
	return c, nil
}

func (c *cluster) run(ctx context.Context, prog string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, prog), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", prog, err, out)
	}
	return nil
}

// stop stops the cluster and removes its directory.
func (c *cluster) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.run(ctx, "pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "fast", "-w", "stop")
	os.RemoveAll(c.dir)
}

// postmasterPID reads the cluster's postmaster.pid.
func (c *cluster) postmasterPID() (int, error) {
	f, err := os.Open(filepath.Join(c.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan()
	return strconv.Atoi(strings.TrimSpace(s.Text()))
}

// cpuSeconds is the CPU time of the cluster's processes so far: the
// postmaster's own and its reaped children's (autovacuum workers and
// backends that exited), and its live children's.
func (c *cluster) cpuSeconds() float64 {
	pm, err := c.postmasterPID()
	if err != nil {
		return 0
	}
	total := procTimes(pm, true)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pm {
			continue
		}
		if ppid(pid) == pm {
			total += procTimes(pid, false)
		}
	}
	return total
}

// procTimes is utime+stime of pid (with children: and cutime+cstime), in
// seconds.
func procTimes(pid int, children bool) float64 {
	f := statFields(pid)
	if len(f) < 17 {
		return 0
	}
	var sum float64
	idx := []int{13, 14}
	if children {
		idx = append(idx, 15, 16)
	}
	for _, i := range idx {
		v, _ := strconv.ParseFloat(f[i], 64)
		sum += v
	}
	return sum / 100 // USER_HZ
}

func ppid(pid int) int {
	f := statFields(pid)
	if len(f) < 4 {
		return 0
	}
	p, _ := strconv.Atoi(f[3])
	return p
}

// statFields splits /proc/pid/stat, the command (in parentheses) as one
// field.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return append([]string{"pid", "comm"}, strings.Fields(s[i+1:])...)
}

// benchMonth runs the month: both clusters, the maximum measured on both
// at once, then both modes for minutes at load × that maximum.
func benchMonth(ctx context.Context, maxRate, load float64, minutes int, retention, span time.Duration, events int, machine Machine, logf func(string, ...any)) (*MonthResults, error) {
	res := &MonthResults{
		GeneratedAt: time.Now().UTC().Truncate(time.Second), Machine: machine, Load: load, Minutes: minutes,
		Retention: retention.String(), Span: span.String(), ClusterSettings: clusterSettings, MaxRates: map[string]float64{},
	}
	modes := []string{"delete", "partitions"}
	envs := map[string]*environment{}
	for _, m := range modes {
		c, err := startCluster(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("%s cluster: %w", m, err)
		}
		defer c.stop()
		env, err := newEnvironment(ctx, c.url)
		if err != nil {
			return nil, err
		}
		defer env.close()
		env.cluster = c
		if m == "partitions" {
			env.prepare = func(ctx context.Context, url string) error {
				pool, err := pgxpool.New(ctx, url)
				if err != nil {
					return err
				}
				defer pool.Close()
				for _, t := range inboxparts.Tables {
					if err := inboxparts.Convert(ctx, pool, t, span, zerolog.Nop()); err != nil {
						return err
					}
				}
				return nil
			}
		}
		envs[m] = env
		res.Machine.PostgreSQL, res.Machine.Autovacuum = env.serverVersion, env.autovacuum
		logf("  %s cluster: port %d, %s, autovacuum %s", m, c.port, shortVersion(env.serverVersion), env.autovacuum)
	}
	if maxRate <= 0 {
		logf("… the end-to-end maximum, on both clusters at once (%d events each)", events)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		for _, m := range modes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := benchEndToEnd(ctx, envs[m], events, 0, profiles{}, false)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", m, err))
					return
				}
				res.MaxRates[m] = r.PerSecond
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		maxRate = min(res.MaxRates["delete"], res.MaxRates["partitions"])
		logf("  maxima: delete %.0f, partitions %.0f events/s", res.MaxRates["delete"], res.MaxRates["partitions"])
	}
	res.MaxRate, res.Offered = maxRate, load*maxRate
	logf("… month: %.0f events/s offered (%.0f%% of %.0f) to both modes at once for %d minutes, retention %s, span %s",
		res.Offered, load*100, maxRate, minutes, retention, span)
	extra := []string{"INBOXD_RETENTION=" + retention.String(), "INBOXD_RETENTION_INTERVAL=1s", "INBOXD_OUTBOX_RETENTION=" + retention.String()}
	worlds := map[string]*latencyWorld{}
	for _, m := range modes {
		w, err := startLatencyWorld(ctx, envs[m], extra...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		defer w.close(envs[m])
		worlds[m] = w
	}
	start := time.Now().Add(time.Second).Truncate(time.Second)
	runs := make([]MonthRun, len(modes))
	var wg sync.WaitGroup
	for i, m := range modes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = monthRun(ctx, m, envs[m].cluster, worlds[m], res.Offered, minutes, start, func(f string, a ...any) {
				logf("  [%s] "+f, append([]any{m}, a...)...)
			})
		}()
	}
	wg.Wait()
	res.Runs = runs
	return res, nil
}

// monthRun runs one mode from start for minutes, sampling each minute.
func monthRun(ctx context.Context, mode string, c *cluster, w *latencyWorld, offered float64, minutes int, start time.Time, logf func(string, ...any)) MonthRun {
	run := MonthRun{Mode: mode}
	if err := monthSample(ctx, &run, c, w, offered, minutes, start, logf); err != nil {
		run.Error = err.Error()
		logf("stopped early: %v", err)
	}
	return run
}

// clusterCounters are the cumulative counters a minute's figures are
// differences of.
type clusterCounters struct {
	wal     float64 // pg_current_wal_lsn, bytes
	cpu     float64 // seconds
	deleted float64 // retention's deleted processed rows
}

func (w *latencyWorld) counters(ctx context.Context, c *cluster) (clusterCounters, error) {
	var k clusterCounters
	if err := w.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&k.wal); err != nil {
		return k, err
	}
	k.cpu = c.cpuSeconds()
	k.deleted = w.daemon.counter("inboxd_retention_deleted_rows_total", "status", "processed")
	return k, nil
}

func monthSample(ctx context.Context, run *MonthRun, c *cluster, w *latencyWorld, offered float64, minutes int, start time.Time, logf func(string, ...any)) error {
	adm := kadm.NewClient(w.kafka.producer)
	select {
	case <-time.After(time.Until(start)):
	case <-ctx.Done():
		return ctx.Err()
	}
	type produced struct {
		n       int
		took    time.Duration
		lastIDs []string
		err     error
	}
	var sent atomic.Int64
	prodDone := make(chan produced, 1)
	d := time.Duration(minutes) * time.Minute
	go func() {
		var p produced
		p.n, p.took, p.lastIDs, p.err = w.kafka.paced(ctx, "m-", offered, d, benchPayload, &sent)
		prodDone <- p
	}()

	// Autovacuum, sampled every second.
	avCtx, stopAV := context.WithCancel(ctx)
	defer stopAV()
	var avMu sync.Mutex
	avSeconds, avRuns := 0.0, 0
	seen := map[string]bool{}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-avCtx.Done():
				return
			case <-t.C:
			}
			rows, err := w.pool.Query(avCtx, `SELECT pid::text || '/' || coalesce(xact_start::text, '') FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'`)
			if err != nil {
				continue
			}
			avMu.Lock()
			for rows.Next() {
				var id string
				if rows.Scan(&id) == nil {
					avSeconds++
					if !seen[id] {
						seen[id] = true
						avRuns++
					}
				}
			}
			avMu.Unlock()
			rows.Close()
		}
	}()

	prev, err := w.counters(ctx, c)
	if err != nil {
		return err
	}
	first := prev
	var recv []float64
	count, processedAll := 0, 0
	lastAV, lastAVRuns := 0.0, 0
	for k := range minutes * 60 {
		from := start.Add(time.Duration(k) * time.Second)
		to := from.Add(time.Second)
		select {
		case <-time.After(time.Until(to.Add(windowLag))):
		case <-ctx.Done():
			return ctx.Err()
		case code := <-w.daemon.exited():
			return fmt.Errorf("daemon stopped early with exit code %d:\n%s", code, w.daemon.stderr.String())
		}
		rows, err := w.pool.Query(ctx, `SELECT extract(epoch FROM processed_at - received_at) * 1000
			FROM inbox WHERE status = 'processed' AND processed_at >= $1 AND processed_at < $2`, from, to)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r float64
			if err := rows.Scan(&r); err != nil {
				rows.Close()
				return err
			}
			recv = append(recv, r)
			count++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if (k+1)%60 != 0 {
			continue
		}
		m := MonthMinute{Minute: (k + 1) / 60, ProcessedPerSecond: float64(count) / 60}
		m.ReceivedToProcessedP99MS = percentile(recv, 0.99)
		if err := w.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(t.relid)), 0)::bigint,
				count(*) FILTER (WHERE t.isleaf AND t.level > 0),
				(SELECT count(*) FROM inbox WHERE status = 'received') + (SELECT count(*) FROM inbox WHERE status = 'processing'),
				coalesce(sum(s.n_dead_tup), 0)::bigint
			FROM (SELECT 'inbox'::regclass AS relid, false AS isleaf, 0 AS level
			      UNION ALL SELECT relid, isleaf, level FROM pg_partition_tree('inbox') WHERE level > 0) t
			LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid`).
			Scan(&m.InboxBytes, &m.Partitions, &m.Backlog, &m.DeadTuples); err != nil {
			return err
		}
		cur, err := w.counters(ctx, c)
		if err != nil {
			return err
		}
		if count > 0 {
			m.WALBytesPerEvent = (cur.wal - prev.wal) / float64(count)
			m.CPUMSPerEvent = (cur.cpu - prev.cpu) * 1000 / float64(count)
		}
		m.RetentionDeletedPerSecond = (cur.deleted - prev.deleted) / 60
		avMu.Lock()
		m.AutovacuumSeconds, m.AutovacuumRuns = avSeconds-lastAV, avRuns-lastAVRuns
		lastAV, lastAVRuns = avSeconds, avRuns
		avMu.Unlock()
		prev = cur
		run.Minutes = append(run.Minutes, m)
		logf("minute %2d: %6.0f processed/s  p99 %6.1f ms  inbox %7.1f MB (%d partitions)  backlog %6d  dead tuples %7d  retention deletes %6.0f/s  WAL %6.0f B/event  PostgreSQL CPU %.3f ms/event  autovacuum %2.0fs (%d runs)",
			m.Minute, m.ProcessedPerSecond, m.ReceivedToProcessedP99MS, float64(m.InboxBytes)/1e6, m.Partitions, m.Backlog,
			m.DeadTuples, m.RetentionDeletedPerSecond, m.WALBytesPerEvent, m.CPUMSPerEvent, m.AutovacuumSeconds, m.AutovacuumRuns)
		processedAll += count
		recv, count = recv[:0], 0
		if offs, err := adm.FetchOffsets(ctx, "inboxd-bench"); err == nil {
			_, _ = adm.DeleteRecords(ctx, offs.Offsets())
		}
	}
	p := <-prodDone
	if p.err != nil {
		return p.err
	}
	stopAV()
	last, err := w.counters(ctx, c)
	if err != nil {
		return err
	}
	run.Produced = p.n
	run.ProcessedPerSecond = float64(processedAll) / d.Seconds()
	if processedAll > 0 {
		run.WALBytesPerEvent = (last.wal - first.wal) / float64(processedAll)
		run.CPUMSPerEvent = (last.cpu - first.cpu) * 1000 / float64(processedAll)
	}
	run.RetentionDeleted = last.deleted
	avMu.Lock()
	run.AutovacuumSeconds = avSeconds
	avMu.Unlock()
	run.RateLastOverFirst, run.P99LastOverFirst, run.SizeLastOverFirst = lastOverFirst(run.Minutes)
	producedAt := time.Now()
	err = waitProcessed(ctx, w.pool, topic, p.lastIDs, w.daemon.exited(), w.daemon.stderr.String, drainLimit)
	switch {
	case err == nil:
		run.Drained = true
	case errors.Is(err, errNotProcessed):
	default:
		return fmt.Errorf("drain: %w", err)
	}
	run.DrainSeconds = time.Since(producedAt).Seconds()
	logf("done: %d produced, %.0f processed/s, WAL %.0f B/event, CPU %.3f ms/event, retention deleted %.0f rows; last 5 min / first 5: rate %.3f, p99 %.3f, size %.3f",
		run.Produced, run.ProcessedPerSecond, run.WALBytesPerEvent, run.CPUMSPerEvent, run.RetentionDeleted,
		run.RateLastOverFirst, run.P99LastOverFirst, run.SizeLastOverFirst)
	return nil
}

// lastOverFirst are the means of the last 5 minutes over the first 5 of
// the rate, the p99 and the size (0 with fewer than 10 minutes).
func lastOverFirst(ms []MonthMinute) (rate, p99, size float64) {
	if len(ms) < 10 {
		return 0, 0, 0
	}
	mean := func(part []MonthMinute, f func(MonthMinute) float64) float64 {
		var s float64
		for _, m := range part {
			s += f(m)
		}
		return s / float64(len(part))
	}
	ratio := func(f func(MonthMinute) float64) float64 {
		a := mean(ms[:5], f)
		if a == 0 {
			return 0
		}
		return mean(ms[len(ms)-5:], f) / a
	}
	return ratio(func(m MonthMinute) float64 { return m.ProcessedPerSecond }),
		ratio(func(m MonthMinute) float64 { return m.ReceivedToProcessedP99MS }),
		ratio(func(m MonthMinute) float64 { return float64(m.InboxBytes) })
}

// counter is the value of the daemon's counter name with label = value;
// 0 when absent.
func (d *daemon) counter(name, label, value string) float64 {
	mfs, err := d.metrics.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// writeMonth writes month.json and month.svg into dir.
func writeMonth(dir string, r *MonthResults) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(dir, "month.json", r); err != nil {
		return err
	}
	return monthChart(filepath.Join(dir, "month.svg"), r)
}

// writeJSON writes v, indented, to dir/name.
func writeJSON(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
}

// replotMonth draws month.svg from a month.json into dir (default: its
// directory).
func replotMonth(path, dir string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r MonthResults
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	if dir == "" {
		dir = filepath.Dir(path)
	}
	return monthChart(filepath.Join(dir, "month.svg"), &r)
}
