package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// latencyLinger is the producer's linger in the latency and long runs: the
// time from produced_at to the broker is the producer's batching plus the
// broker's, kept short so that the numbers are inboxd's.
const latencyLinger = time.Millisecond

// paced produces records stamped with produced_at at rate per second for
// d, in steps of 2 ms (so at most a few dozen records leave at once), with
// event ids prefix0, prefix1, …. It returns how many it produced, how long
// producing took, and the last event id of each partition once the broker
// has them all. sent, when not nil, follows how many were handed to the
// producer.
func (k *kafka) paced(ctx context.Context, prefix string, rate float64, d time.Duration, payload []byte, sent *atomic.Int64) (int, time.Duration, []string, error) {
	t := newTracker()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	n := 0
	for {
		el := time.Since(start)
		if el >= d {
			break
		}
		due := int(rate * el.Seconds())
		for ; n < due; n++ {
			r := record(prefix, n, payload, true)
			k.producer.Produce(ctx, r, t.promise(prefix+strconv.Itoa(n)))
		}
		if sent != nil {
			sent.Store(int64(n))
		}
		select {
		case <-ctx.Done():
			return n, time.Since(start), nil, ctx.Err()
		case <-tick.C:
		}
	}
	elapsed := time.Since(start)
	if err := k.producer.Flush(ctx); err != nil {
		return n, elapsed, nil, fmt.Errorf("produce: %w", err)
	}
	ids, err := t.result()
	return n, elapsed, ids, err
}

// latencyWorld is a database, a cluster and the daemon running on them,
// warmed up: the consumer group joined and a first batch processed.
type latencyWorld struct {
	db     *database
	pool   *pgxpool.Pool
	kafka  *kafka
	daemon *daemon
	dir    string
}

func startLatencyWorld(ctx context.Context, env *environment, extraEnv ...string) (*latencyWorld, error) {
	w := &latencyWorld{}
	ok := false
	defer func() {
		if !ok {
			w.close(env)
		}
	}()
	var err error
	if w.db, err = env.newDatabase(ctx); err != nil {
		return nil, err
	}
	if w.pool, err = openPool(ctx, w.db, 0); err != nil {
		return nil, err
	}
	if w.kafka, err = newKafka(0, latencyLinger); err != nil {
		return nil, err
	}
	if w.dir, err = os.MkdirTemp("", "inboxd-bench-"); err != nil {
		return nil, err
	}
	routes, err := routesFile(w.dir)
	if err != nil {
		return nil, err
	}
	w.daemon = startDaemon(ctx, daemonEnv(w.db, w.kafka, routes, extraEnv...))
	lastIDs, err := w.kafka.fill(ctx, "warm-", 1000, func(int) []byte { return benchPayload })
	if err != nil {
		return nil, err
	}
	if err := waitProcessed(ctx, w.pool, topic, lastIDs, w.daemon.exited(), w.daemon.stderr.String, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	ok = true
	return w, nil
}

// close stops the daemon and drops what the world holds; it may be called
// more than once.
func (w *latencyWorld) close(env *environment) error {
	var err error
	if w.daemon != nil {
		err = w.daemon.stop()
		w.daemon = nil
	}
	if w.kafka != nil {
		w.kafka.close()
		w.kafka = nil
	}
	if w.pool != nil {
		w.pool.Close()
		w.pool = nil
	}
	if w.db != nil {
		env.drop(w.db)
		w.db = nil
	}
	if w.dir != "" {
		os.RemoveAll(w.dir)
		w.dir = ""
	}
	return err
}

// benchLatency runs the daemon at each offered load (a fraction of
// maxRate) for d, one load after the other on the same daemon, each phase
// drained before the next, and measures per phase the percentiles of
// processed_at − received_at and processed_at − produced_at in SQL.
func benchLatency(ctx context.Context, env *environment, maxRate float64, loads []float64, headline float64, d time.Duration, logf func(string, ...any)) (*LatencyResults, error) {
	w, err := startLatencyWorld(ctx, env)
	if err != nil {
		return nil, err
	}
	defer w.close(env)
	res := &LatencyResults{MaxRate: maxRate, Load: headline, PhaseSeconds: d.Seconds(), ProducerLingerMS: float64(latencyLinger) / float64(time.Millisecond)}
	for i, load := range loads {
		var lo int64
		if err := w.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM inbox`).Scan(&lo); err != nil {
			return nil, err
		}
		offered := load * maxRate
		// The histogram is the daemon's since its start (the warm-up and
		// the loads before this one, each drained): the phase's own
		// observations are the difference.
		delayBefore := w.daemon.outcomeWriteDelay()
		meter, err := startCPUMeter(ctx, w.pool, w.db)
		if err != nil {
			return nil, err
		}
		n, took, lastIDs, err := w.kafka.paced(ctx, "l"+strconv.Itoa(i)+"-", offered, d, benchPayload, nil)
		if err != nil {
			return nil, err
		}
		produced := time.Now()
		if err := waitProcessed(ctx, w.pool, topic, lastIDs, w.daemon.exited(), w.daemon.stderr.String, 5*time.Minute); err != nil {
			return nil, err
		}
		p := LatencyPoint{Load: load, Offered: offered, Produced: float64(n) / took.Seconds(), Events: n,
			DrainSeconds: time.Since(produced).Seconds()}
		if p.CPU, err = meter.stop(ctx); err != nil {
			return nil, err
		}
		delay := w.daemon.outcomeWriteDelay().since(delayBefore)
		p.OutcomeWrites = int64(delay.total)
		p.OutcomeWriteDelayP99MS, _ = delay.quantileMS(0.99)
		var count int
		var recv, prod []float64
		if err := w.pool.QueryRow(ctx, `SELECT count(*),
				percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - received_at) * 1000),
				percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - (headers->>$2)::timestamptz) * 1000),
				max(extract(epoch FROM processed_at - received_at) * 1000),
				max(extract(epoch FROM processed_at - (headers->>$2)::timestamptz) * 1000)
			FROM inbox WHERE id > $1 AND status = 'processed'`, lo, producedAtHeader).
			Scan(&count, &recv, &prod, &p.ReceivedToProcessed.MaxMS, &p.ProducedToProcessed.MaxMS); err != nil {
			return nil, err
		}
		if count != n {
			return nil, fmt.Errorf("load %.2f: %d processed rows, want %d", load, count, n)
		}
		p.ReceivedToProcessed.P50MS, p.ReceivedToProcessed.P95MS, p.ReceivedToProcessed.P99MS = recv[0], recv[1], recv[2]
		p.ProducedToProcessed.P50MS, p.ProducedToProcessed.P95MS, p.ProducedToProcessed.P99MS = prod[0], prod[1], prod[2]
		res.Points = append(res.Points, p)
		logf("  load %3.0f%%: offered %6.0f/s, produced %6.0f/s; received→processed p50 %5.1f p95 %5.1f p99 %6.1f ms; produced→processed p50 %5.1f p95 %5.1f p99 %6.1f ms; outcome write p99 %5.1f ms; CPU cores: process %.2f, PostgreSQL backends %.2f",
			load*100, offered, p.Produced, recv[0], recv[1], recv[2], prod[0], prod[1], prod[2], p.OutcomeWriteDelayP99MS, p.CPU.Process/p.CPU.Wall, p.CPU.Postgres/p.CPU.Wall)
		time.Sleep(time.Second) // let the completions' vacuum debt settle a little
	}
	if err := w.close(env); err != nil {
		return nil, err
	}
	return res, nil
}
