package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// The long runs sample latency while they run: with retention on, rows
// are deleted a few seconds after processed_at, so they cannot be read
// afterwards. Every second, the rows processed in one second-long window
// are read back through inbox_processed_at_idx, windowLag after the
// window's end (long enough for the completing transaction to commit, short
// enough that retention has not deleted them yet).
const windowLag = 1500 * time.Millisecond

// drainLimit is how long a long run waits, once the producer stopped, for
// the backlog to be processed; a run that fell behind may need far longer,
// and what is left is reported instead.
const drainLimit = 2 * time.Minute

// benchLong runs the daemon for minutes at load × maxRate, first with
// retention of retention (INBOXD_RETENTION_INTERVAL 1s), then without it
// (the daemon's defaults: 168h, every minute), printing per minute the
// processed rate, the p99s and the inbox's size.
func benchLong(ctx context.Context, env *environment, maxRate, load float64, minutes int, retention, vacuumEvery time.Duration, logf func(string, ...any)) (*LongResults, error) {
	res := &LongResults{MaxRate: maxRate, Load: load, Offered: load * maxRate, Minutes: minutes, Retention: retention.String()}
	if vacuumEvery > 0 {
		res.VacuumEvery = vacuumEvery.String()
	}
	for _, with := range []bool{true, false} {
		var extra []string
		name := "without retention (defaults: INBOXD_RETENTION 168h, interval 1m)"
		if with {
			extra = []string{"INBOXD_RETENTION=" + retention.String(), "INBOXD_RETENTION_INTERVAL=1s"}
			name = fmt.Sprintf("with retention (INBOXD_RETENTION=%s, INBOXD_RETENTION_INTERVAL=1s)", retention)
		}
		logf("… long run %s: %.0f events/s offered (%.0f%% of %.0f) for %d minutes", name, res.Offered, load*100, maxRate, minutes)
		run, err := longRun(ctx, env, res.Offered, minutes, with, vacuumEvery, extra, logf)
		if err != nil {
			return nil, err
		}
		run.Name = name
		res.Runs = append(res.Runs, run)
	}
	if len(res.Runs) == 2 && res.Runs[1].ProcessedPerSecond > 0 {
		res.RetentionRateRatio = res.Runs[0].ProcessedPerSecond / res.Runs[1].ProcessedPerSecond
	}
	return res, nil
}

func longRun(ctx context.Context, env *environment, offered float64, minutes int, retention bool, vacuumEvery time.Duration, extraEnv []string, logf func(string, ...any)) (LongRun, error) {
	w, err := startLatencyWorld(ctx, env, extraEnv...)
	if err != nil {
		return LongRun{}, err
	}
	defer w.close(env)
	adm := kadm.NewClient(w.kafka.producer)

	type vacuumed struct {
		n    int
		took time.Duration
		err  error
	}
	vacuumCtx, stopVacuum := context.WithCancel(ctx)
	defer stopVacuum()
	vacuumDone := make(chan vacuumed, 1)
	go func() {
		var v vacuumed
		defer func() { vacuumDone <- v }()
		if vacuumEvery <= 0 {
			return
		}
		for {
			select {
			case <-vacuumCtx.Done():
				return
			case <-time.After(vacuumEvery):
			}
			start := time.Now()
			if _, err := w.pool.Exec(vacuumCtx, `VACUUM inbox`); err != nil {
				if vacuumCtx.Err() == nil {
					v.err = err
				}
				return
			}
			v.n++
			v.took += time.Since(start)
		}
	}()

	type produced struct {
		n       int
		took    time.Duration
		lastIDs []string
		err     error
	}
	var sent atomic.Int64
	prodDone := make(chan produced, 1)
	d := time.Duration(minutes) * time.Minute
	start := time.Now().Truncate(time.Millisecond)
	go func() {
		var p produced
		p.n, p.took, p.lastIDs, p.err = w.kafka.paced(ctx, "s-", offered, d, benchPayload, &sent)
		prodDone <- p
	}()

	run := LongRun{Retention: retention}
	var (
		recv, prod    []float64
		count         int
		processedAll  int
		lateWindows   int
		lastDeleted   int64
		minuteStarted = start
	)
	if err := w.pool.QueryRow(ctx, `SELECT coalesce(n_tup_del, 0) FROM pg_stat_user_tables WHERE relname = 'inbox'`).Scan(&lastDeleted); err != nil {
		return LongRun{}, err
	}
	windows := minutes * 60
	for k := range windows {
		from := start.Add(time.Duration(k) * time.Second)
		to := from.Add(time.Second)
		select {
		case <-time.After(time.Until(to.Add(windowLag))):
		case <-ctx.Done():
			return LongRun{}, ctx.Err()
		case code := <-w.daemon.exited():
			return LongRun{}, fmt.Errorf("daemon stopped early with exit code %d:\n%s", code, w.daemon.stderr.String())
		}
		if retention && time.Since(to) > 3*time.Second {
			lateWindows++ // retention may have deleted some of its rows
		}
		rows, err := w.pool.Query(ctx, `SELECT extract(epoch FROM processed_at - received_at) * 1000,
				extract(epoch FROM processed_at - (headers->>$3)::timestamptz) * 1000
			FROM inbox WHERE status = 'processed' AND processed_at >= $1 AND processed_at < $2`, from, to, producedAtHeader)
		if err != nil {
			return LongRun{}, err
		}
		for rows.Next() {
			var r, p float64
			if err := rows.Scan(&r, &p); err != nil {
				rows.Close()
				return LongRun{}, err
			}
			recv, prod = append(recv, r), append(prod, p)
			count++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return LongRun{}, err
		}
		if (k+1)%60 != 0 {
			continue
		}

		// A minute is complete.
		m := LongMinute{Minute: (k + 1) / 60, ProcessedPerSecond: float64(count) / 60}
		m.ReceivedToProcessedP99MS = percentile(recv, 0.99)
		m.ProducedToProcessedP50MS = percentile(prod, 0.50)
		m.ProducedToProcessedP99MS = percentile(prod, 0.99)
		var deleted int64
		if err := w.pool.QueryRow(ctx, `SELECT pg_total_relation_size('inbox'),
				(SELECT count(*) FROM inbox WHERE status = 'received') + (SELECT count(*) FROM inbox WHERE status = 'processing'),
				s.n_tup_del, s.n_dead_tup, s.autovacuum_count
			FROM pg_stat_user_tables AS s WHERE s.relname = 'inbox'`).
			Scan(&m.InboxBytes, &m.Backlog, &deleted, &m.DeadTuples, &m.Autovacuums); err != nil {
			return LongRun{}, err
		}
		m.DeletedPerSecond = float64(deleted-lastDeleted) / time.Since(minuteStarted).Seconds()
		lastDeleted, minuteStarted = deleted, time.Now()
		m.OfferedSoFar = sent.Load()
		run.Minutes = append(run.Minutes, m)
		logf("  minute %2d: %6.0f processed/s  p99 received→processed %6.1f ms  produced→processed p50 %5.1f p99 %6.1f ms  inbox %7.1f MB  backlog %6d rows  deleted %6.0f/s  dead tuples %d, autovacuums %d",
			m.Minute, m.ProcessedPerSecond, m.ReceivedToProcessedP99MS, m.ProducedToProcessedP50MS, m.ProducedToProcessedP99MS,
			float64(m.InboxBytes)/1e6, m.Backlog, m.DeletedPerSecond, m.DeadTuples, m.Autovacuums)
		processedAll += count
		recv, prod, count = recv[:0], prod[:0], 0
		// kfake keeps every record in memory: drop what the group has
		// committed.
		if offs, err := adm.FetchOffsets(ctx, "inboxd-bench"); err == nil {
			_, _ = adm.DeleteRecords(ctx, offs.Offsets())
		}
	}

	p := <-prodDone
	if p.err != nil {
		return LongRun{}, p.err
	}
	stopVacuum()
	v := <-vacuumDone
	if v.err != nil {
		return LongRun{}, fmt.Errorf("vacuum: %w", v.err)
	}
	run.Vacuums, run.VacuumSeconds = v.n, v.took.Seconds()
	if v.n > 0 {
		logf("  %d VACUUMs of the inbox took %.0fs in all", v.n, run.VacuumSeconds)
	}
	run.Produced = p.n
	run.ProducedPerSecond = float64(p.n) / p.took.Seconds()
	run.ProcessedPerSecond = float64(processedAll) / d.Seconds()
	run.LateWindows = lateWindows
	producedAt := time.Now()
	err = waitProcessed(ctx, w.pool, topic, p.lastIDs, w.daemon.exited(), w.daemon.stderr.String, drainLimit)
	switch {
	case err == nil:
		run.Drained = true
		run.DrainSeconds = time.Since(producedAt).Seconds()
		logf("  %d produced (%.0f/s), %.0f processed/s over the run, drained %.1fs after the producer stopped",
			p.n, run.ProducedPerSecond, run.ProcessedPerSecond, run.DrainSeconds)
	case errors.Is(err, errNotProcessed):
		if err := w.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM inbox WHERE status = 'received')
				+ (SELECT count(*) FROM inbox WHERE status = 'processing')`).Scan(&run.BacklogAfterDrain); err != nil {
			return LongRun{}, err
		}
		run.DrainSeconds = time.Since(producedAt).Seconds()
		logf("  %d produced (%.0f/s), %.0f processed/s over the run; %d rows still unprocessed %s after the producer stopped (not waited for)",
			p.n, run.ProducedPerSecond, run.ProcessedPerSecond, run.BacklogAfterDrain, drainLimit)
	default:
		return LongRun{}, fmt.Errorf("drain: %w", err)
	}
	if lateWindows > 0 {
		logf("  %d one-second windows were read more than 3s late: retention may have deleted some of their rows before they were counted", lateWindows)
	}
	return run, w.close(env)
}

// percentile is the nearest-rank q-quantile of vs (sorted in place); 0 for
// none.
func percentile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	i := int(q*float64(len(vs)) + 0.5)
	return vs[min(max(i-1, 0), len(vs)-1)]
}
