package faultsuite

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Scenario: a transactional batch route (the embedder's batch.effect:
// batches of up to 100 rows, each batch's effects and every row's outcome
// in one transaction) fed from Kafka while the process is SIGKILLed three
// times and restarted; 5 % of the rows fail on their own (RowErrors) and
// are retried. Nothing lost, and no event with two committed effects.
func TestTxBatchSIGKILLStorm(t *testing.T) {
	scenario(t, heavy)
	db := sharedDB(t)
	lease := 2 * time.Second
	run := NewRun(t, db.Pool, nil, lease)
	run.Ledger.RateSpan = 500 * time.Millisecond
	kafka := NewKafka(t, "bulk", KafkaOptions{Partitions: 4})
	run.OnFailure(func() string { return kafka.DescribeGroup("batch") })
	const workers = 4
	env := append(baseEnv(db.URL, lease, workers, "FAULT_FAIL_RATE=0.05"), kafka.DaemonEnv("batch")...)
	env = append(env, embedderEnv(nil, runsFile(t))...)
	n, kills := pick(3000, 30000), pick(3, 12)
	start := func(name string) *Daemon {
		return StartDaemon(t, DaemonSpec{Name: name, Binary: bins.Embedder, Env: env})
	}
	d := start("gen-0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prod := kafka.Produce(ctx, Stream{N: n, Prefix: "b-", Rate: pick(300, 1000),
		Type: func(int) string { return "batch.effect" }})
	effects := func() int {
		var c int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM effects`).Scan(&c)
		return c
	}
	var recovered time.Time
	midStream := 0
	for k := range kills {
		target := (k + 1) * n / (kills + 2)
		WaitFor(t, scale(60*time.Second), fmt.Sprintf("%d effects before kill %d", target, k+1),
			func() bool { return effects() >= target })
		WaitFor(t, scale(60*time.Second), fmt.Sprintf("%s processing before kill %d", d.Name, k+1), func() bool {
			m, err := d.Metrics()
			return err == nil && m.Value("inboxd_worker_completed_total", "outcome", "processed") >= 50
		})
		kafka.WaitGroupSettled(t, "batch", 1, 30*time.Second)
		f := run.Ledger.Observe(workers, d)
		if prod.Count() < n {
			midStream++
		}
		d.Kill()
		run.Ledger.Record("SIGKILL", f)
		d = start(fmt.Sprintf("gen-%d", k+1))
		recovered = time.Now()
	}
	CheckLeasesRecovered(t, db.Pool, recovered, lease)
	prod.Wait(t, scale(120*time.Second))
	if err := prod.Err(); err != nil {
		t.Fatalf("producer: %v", err)
	}
	run.Expect("bulk", prod.Acked()...)
	run.WaitProcessed(scale(60 * time.Second))
	run.Check()
	if got := effects(); got != len(prod.Acked()) {
		t.Errorf("EFFECTS: %d committed effects for %d events, want exactly one each", got, len(prod.Acked()))
	}
	var retried, rows int
	_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE attempts > 1), count(*) FROM inbox`).Scan(&retried, &rows)
	avg, most := batchSizes(t, db.Pool)
	run.Note("rows_attempted_twice=%d kills_mid_stream=%d batch_rows_avg=%.1f batch_rows_max=%d", retried, midStream, avg, most)
	if avg < 2 {
		t.Errorf("the batches held %.1f rows on average: the route did not batch", avg)
	}
	if midStream == 0 {
		t.Errorf("every kill came after the last event was produced: no kill mid-stream")
	}
}

// Scenario: an ordered transactional batch route (the embedder's
// obatch.effect, on_dead: block) fed 8 keys from Kafka, 2 % of the rows
// failing on their own, while the process is SIGKILLed three times:
// nothing lost, no duplicate effect, and each key's effects committed in
// arrival order.
func TestOrderedTxBatchSIGKILL(t *testing.T) {
	scenario(t, heavy)
	db := sharedDB(t)
	lease := 2 * time.Second
	run := NewRun(t, db.Pool, nil, lease)
	k := NewKafka(t, "obulk", KafkaOptions{Partitions: 4})
	run.OnFailure(func() string { return k.DescribeGroup("obatch") })
	const workers = 4
	n, keys, kills := pick(2000, 20000), 40, pick(3, 12)
	env := append(baseEnv(db.URL, lease, workers, "FAULT_FAIL_RATE=0.02"), k.DaemonEnv("obatch")...)
	env = append(env, embedderEnv(nil, runsFile(t))...)
	start := func(name string) *Daemon {
		return StartDaemon(t, DaemonSpec{Name: name, Binary: bins.Embedder, Env: env})
	}
	d := start("gen-0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inputs := ProduceKeyedOf(ctx, t, k, k.Topic, "obatch.effect", n, keys, pick(400, 1000))
	effects := func() int {
		var c int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM effects`).Scan(&c)
		return c
	}
	for i := range kills {
		target := (i + 1) * n / (kills + 2)
		WaitFor(t, scale(60*time.Second), fmt.Sprintf("%d effects before kill %d", target, i+1), func() bool { return effects() >= target })
		k.WaitGroupSettled(t, "obatch", 1, 30*time.Second)
		f := run.Ledger.Observe(workers, d)
		d.Kill()
		run.Ledger.Record("SIGKILL", f)
		d = start(fmt.Sprintf("gen-%d", i+1))
	}
	inputs.Wait(t, scale(120*time.Second))
	acked := inputs.Acked()
	run.Expect(k.Topic, acked...)
	run.WaitProcessed(scale(60 * time.Second))
	run.Check()

	// Each key's effects, in commit order (a key's next row runs only
	// once the row before it committed), must follow its inputs' order.
	rows, err := db.Pool.Query(context.Background(), `SELECT event_id FROM effects ORDER BY at`)
	if err != nil {
		t.Fatal(err)
	}
	last := map[int]int{}
	var disorder []string
	committed := 0
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		committed++
		i, err := strconv.Atoi(strings.TrimPrefix(id, "in-"))
		if err != nil {
			t.Fatalf("effect of %q: not an input id", id)
		}
		key := i % keys
		if prev, ok := last[key]; ok && i < prev {
			disorder = append(disorder, fmt.Sprintf("key k%02d: %s committed after in-%06d", key, id, prev))
		}
		last[key] = max(last[key], i)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(disorder) > 0 {
		t.Errorf("ORDER: %d effects committed out of their key's order, e.g. %s", len(disorder), strings.Join(disorder[:min(5, len(disorder))], "; "))
	}
	if committed != len(acked) {
		t.Errorf("EFFECTS: %d committed for %d inputs, want exactly one each", committed, len(acked))
	}
	avg, most := batchSizes(t, db.Pool)
	run.Note("keys=%d out_of_order=%d batch_rows_avg=%.1f batch_rows_max=%d", keys, len(disorder), avg, most)
	if avg < 1.5 {
		t.Errorf("the batches held %.1f rows on average: the route did not batch", avg)
	}
	if most > keys {
		t.Errorf("ORDER: a batch committed %d rows, more than the %d keys: it held two rows of a key", most, keys)
	}
}

// batchSizes is the average and the largest number of effects committed
// by one transaction: the rows of a batch.
func batchSizes(t *testing.T, db *pgxpool.Pool) (avg float64, most int) {
	t.Helper()
	if err := db.QueryRow(context.Background(), `SELECT coalesce(avg(n), 0), coalesce(max(n), 0)
		FROM (SELECT count(*) AS n FROM effects GROUP BY tx) AS b`).Scan(&avg, &most); err != nil {
		t.Errorf("batch sizes: %v", err)
	}
	return avg, most
}
