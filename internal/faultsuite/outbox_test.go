package faultsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/outbox"
)

// The outbox scenarios: consume → process → produce with SIGKILLs, and a
// relay paused past its lease. Their relays run with a small batch
// (outboxBatch) so that the duplicate bound is tight: each of a relay's
// loops (outbox.DefaultLoops) reads, publishes and writes the outcomes of
// one batch at a time, so a relay that dies (or loses its leases) leaves at
// most one batch per loop published with its outcomes unwritten, and its
// successor publishes those rows again, with the same event ids.
const (
	outboxBatch = 50
	outboxLease = 3 * time.Second
	// outboxInFlight is the most a relay has published and not recorded.
	outboxInFlight = outboxBatch * outbox.DefaultLoops
)

// outboxEnv is the relay's configuration in the outbox scenarios (the
// publish timeout must be at most a third of the lease).
func outboxEnv() []string {
	return []string{"INBOXD_OUTBOX=true", "INBOXD_OUTBOX_LEASE=" + outboxLease.String(),
		"INBOXD_OUTBOX_PUBLISH_TIMEOUT=" + (outboxLease / 3).String(), fmt.Sprintf("INBOXD_OUTBOX_BATCH_SIZE=%d", outboxBatch)}
}

// outboxChain: Kafka in (kfake, keyed inputs) → the embedder's
// transactional outbox.effect on an ordered route (an effect row and one
// outbox message per input, 2 % of the attempts failing after the Emit, so
// rolled back) → its relay → out, the daemon SIGKILLed at random points
// while the inputs stream and restarted; a second inbox (cmd/inboxd on a
// database of its own) consumes out. Checks: nothing lost and no effect
// twice (the Run's checks); one outbox row per input, all published; every
// input exactly one distinct output event id; wire duplicates at most
// outboxInFlight per kill; per key, first occurrences in input order; the
// second inbox ends with exactly one processed row per input. It returns
// what the destination holds and the wire duplicates.
func outboxChain(t *testing.T, k *Kafka, out OutDest) OutReport {
	db := sharedDB(t)
	db2 := sharedDB(t)
	lease := 2 * time.Second
	run := NewRun(t, db.Pool, nil, lease)
	run.Ledger.RateSpan = 300 * time.Millisecond
	run.OnFailure(func() string { return k.DescribeGroup("chain") })
	run.OnFailure(func() string { return outboxStatus(db.Pool) })
	const workers = 4
	n, keys, kills := pick(2000, 20000), 8, pick(3, 12)
	env := append(baseEnv(db.URL, lease, workers, append(outboxEnv(),
		"FAULT_OUTBOX_DEST="+out.Destination(), "FAULT_FAIL_RATE=0.02")...), k.DaemonEnv("chain")...)
	env = append(append(env, out.PublishEnv()...), embedderEnv(nil, runsFile(t))...)
	start := func(name string) *Daemon {
		return StartDaemon(t, DaemonSpec{Name: name, Binary: bins.Embedder, Env: env})
	}

	routes := writeRoutes(t, "routes:\n  - type: out.effect\n    handler: ignore\n")
	second := StartDaemon(t, DaemonSpec{Name: "second-inbox", Binary: bins.Inboxd,
		Env: append(baseEnv(db2.URL, lease, 4, "INBOXD_ROUTES="+routes), out.InboxEnv()...)})

	d := start("gen-0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inputs := ProduceKeyed(ctx, t, k, k.Topic, n, keys, pick(200, 500))
	effects := func() int {
		var c int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM effects`).Scan(&c)
		return c
	}
	midStream := 0
	var points []int
	for i := range kills {
		// A random point in the i-th of kills windows spanning 10 % to 85 %
		// of the inputs.
		w := 0.75 / float64(kills)
		target := int((0.10 + w*(float64(i)+0.2+0.6*rand.Float64())) * float64(n))
		points = append(points, target)
		WaitFor(t, scale(60*time.Second), fmt.Sprintf("%d effects before kill %d", target, i+1), func() bool { return effects() >= target })
		// The relay of this process publishing (a restarted one waits for
		// the killed one's leases to expire).
		WaitFor(t, scale(30*time.Second), fmt.Sprintf("%s's relay publishing before kill %d", d.Name, i+1), func() bool {
			m, err := d.Metrics()
			return err == nil && m.Value("inboxd_outbox_published_total") > 0
		})
		k.WaitGroupSettled(t, "chain", 1, 30*time.Second)
		f := run.Ledger.Observe(workers, d)
		if !inputs.Finished() {
			midStream++
		}
		d.Kill()
		run.Ledger.Record("SIGKILL", f)
		d = start(fmt.Sprintf("gen-%d", i+1))
	}
	if midStream == 0 {
		t.Errorf("every kill came after the last input: no kill mid-stream")
	}
	inputs.Wait(t, scale(120*time.Second))
	acked := inputs.Acked()
	run.Expect(k.Topic, acked...)
	run.WaitProcessed(scale(60 * time.Second))
	run.Check()

	// One outbox row per input, every one published.
	WaitFor(t, scale(60*time.Second), "every outbox row published", func() bool {
		var pending int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE status <> 'published'`).Scan(&pending)
		return pending == 0
	})
	var rows, distinctInputs int
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT headers->>'input_id') FROM outbox`).Scan(&rows, &distinctInputs); err != nil {
		t.Fatal(err)
	}
	if rows != len(acked) || distinctInputs != len(acked) {
		t.Errorf("OUTBOX ROWS: %d rows for %d distinct inputs, want one per input (%d)", rows, distinctInputs, len(acked))
	}

	msgs := out.Collect(t)
	rep := CheckOutMessages(t, msgs, acked)
	bound := outboxInFlight * run.Ledger.Count()
	if rep.Duplicates > bound {
		t.Errorf("WIRE DUPLICATES: %d re-publications, bound %d (INBOXD_OUTBOX_BATCH_SIZE %d × %d loops × %d kills: each kill leaves at most each loop's batch in flight unrecorded)",
			rep.Duplicates, bound, outboxBatch, outbox.DefaultLoops, run.Ledger.Count())
	}
	t.Logf("%s: %d messages on the wire, %d distinct, %d duplicates (bound %d)", out.Kind(), rep.Wire, rep.Distinct, rep.Duplicates, bound)

	// The second inbox: exactly one row per input, each processed.
	src := out.Source()
	WaitFor(t, scale(60*time.Second), "second inbox processed every output", func() bool {
		var c int
		_ = db2.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE source = $1 AND status = 'processed'`, src).Scan(&c)
		return c >= len(acked)
	})
	var total, processed, inputsSeen int
	if err := db2.Pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE status = 'processed'),
		count(DISTINCT headers->>'input_id') FROM inbox WHERE source = $1`, src).Scan(&total, &processed, &inputsSeen); err != nil {
		t.Fatal(err)
	}
	if total != len(acked) || processed != len(acked) || inputsSeen != len(acked) {
		t.Errorf("SECOND INBOX: %d rows (%d processed) naming %d distinct inputs, want exactly one processed row per input (%d)",
			total, processed, inputsSeen, len(acked))
	}
	fenced, lost := 0.0, 0.0
	if m, err := d.Metrics(); err == nil {
		fenced, lost = m.Value("inboxd_outbox_fenced_total"), m.Value("inboxd_outbox_lease_lost_total")
	}
	run.Note("dest=%s wire=%d distinct=%d dups=%d bound=%d kills_mid_stream=%d kill_points=%v fenced_last=%.0f lease_lost_last=%.0f",
		out.Kind(), rep.Wire, rep.Distinct, rep.Duplicates, bound, midStream, points, fenced, lost)
	for _, dm := range []*Daemon{d, second} {
		if exited, _, code := dm.Terminate(30 * time.Second); !exited || code != 0 {
			t.Errorf("%s: SIGTERM: exited %v, code %d", dm.Name, exited, code)
		}
	}
	return rep
}

// outboxStatus reports, for failure output, the outbox's rows by status.
func outboxStatus(db *pgxpool.Pool) string {
	var pending, published, dead int
	var lastErr string
	if err := db.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE status = 'pending'),
		count(*) FILTER (WHERE status = 'published'), count(*) FILTER (WHERE status = 'dead'),
		coalesce(max(last_error), '') FROM outbox`).Scan(&pending, &published, &dead, &lastErr); err != nil {
		return "outbox: " + err.Error()
	}
	return fmt.Sprintf("outbox: %d pending, %d published, %d dead; a last_error: %q", pending, published, dead, lastErr)
}

// Scenario: Kafka in → transactional handler + Emit → relay → Kafka out
// (kfake), 3 × SIGKILL + restart while the inputs stream.
func TestOutboxKafkaSIGKILL(t *testing.T) {
	scenario(t, heavy)
	k := NewKafka(t, "in", KafkaOptions{Partitions: 4})
	outboxChain(t, k, newKafkaOut(t, k, "out", 4))
}

// Scenario: the same chain, published to a RabbitMQ queue of its own on the
// real server (amqp:/<queue>, publisher confirms, mandatory).
func TestOutboxRabbitMQSIGKILL(t *testing.T) {
	scenario(t, heavy)
	k := NewKafka(t, "in", KafkaOptions{Partitions: 4})
	outboxChain(t, k, &amqpOut{q: NewRabbitMQ(t), tee: NewRabbitMQ(t)})
}

// Scenario: the same chain, published to a NATS JetStream stream of its
// own: the relay sets Nats-Msg-Id to the event id, so the stream itself
// holds no duplicate however often a killed relay re-publishes.
func TestOutboxNATSSIGKILL(t *testing.T) {
	scenario(t, heavy)
	k := NewKafka(t, "in", KafkaOptions{Partitions: 4})
	out := &natsOut{n: NewNATS(t, 2*time.Second)}
	rep := outboxChain(t, k, out)
	if rep.Duplicates != 0 {
		t.Errorf("NATS DUPLICATES: the stream holds %d re-publications; Nats-Msg-Id should have made JetStream drop them", rep.Duplicates)
	}
}

// Scenario: two replicas running the relay (INBOXD_OUTBOX_LEASE=3s), rows
// written straight into the outbox by SQL (16 keys, each key's rows one
// after another, each committed before the next is written). Replica a is
// SIGSTOPped while it holds shards, stays stopped until b holds all 32,
// then gets SIGCONT while the writes go on. Every row is published; per
// key the first occurrences come in id order; duplicates at most one batch
// (what a had in flight); and a learnt it lost its leases
// (inboxd_outbox_lease_lost_total) or had its late writes fenced
// (inboxd_outbox_fenced_total).
func TestOutboxPausedRelayIsFenced(t *testing.T) {
	scenario(t, heavy)
	db := sharedDB(t)
	k := NewKafka(t, "unused", KafkaOptions{Partitions: 1})
	out := newKafkaOut(t, k, "fenced-out", 4)
	run := NewRun(t, db.Pool, nil, outboxLease)
	run.OnFailure(func() string { return outboxStatus(db.Pool) })
	env := baseEnv(db.URL, outboxLease, 2, append(outboxEnv(), "INBOXD_KAFKA_BROKERS="+k.Brokers())...)
	a := StartDaemon(t, DaemonSpec{Name: "a", Binary: bins.Inboxd, Env: env})
	b := StartDaemon(t, DaemonSpec{Name: "b", Binary: bins.Inboxd, Env: env})

	// The writers: one per key, each row committed before the next.
	const keys = 16
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var written []string
	var writeErr error
	var wg sync.WaitGroup
	for key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(40 * time.Millisecond) // 25 rows/s per key
			defer tick.Stop()
			for seq := 0; ; seq++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				k := fmt.Sprintf("k%02d", key)
				id := fmt.Sprintf("row-%s-%05d", k, seq)
				body, _ := json.Marshal(seqPayload{Key: k, Seq: seq})
				_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox (destination, event_type, event_id, key, headers, payload)
					VALUES ($1, 'fenced.row', $2, $3, jsonb_build_object('input_id', $2::text), $4)`, out.Destination(), id, k, body)
				mu.Lock()
				if err != nil {
					if writeErr == nil {
						writeErr = err
					}
				} else {
					written = append(written, id)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(written) }
	metric := func(d *Daemon, name string) float64 {
		m, err := d.Metrics()
		if err != nil {
			return -1
		}
		return m.Value(name)
	}
	WaitFor(t, 30*time.Second, "both relays holding shards and publishing", func() bool {
		return metric(a, "inboxd_outbox_shards_owned") > 0 && metric(b, "inboxd_outbox_shards_owned") > 0 &&
			metric(a, "inboxd_outbox_published_total") > 0 && metric(b, "inboxd_outbox_published_total") > 0
	})
	a.Pause()
	stoppedAt := time.Now()
	run.Ledger.Record("SIGSTOP", Fault{InFlight: outboxInFlight})
	WaitFor(t, 30*time.Second, "b holding all 32 shards", func() bool { return metric(b, "inboxd_outbox_shards_owned") == 32 })
	before := count()
	WaitFor(t, 30*time.Second, "more rows written while a is stopped", func() bool { return count() >= before+200 })
	a.Resume()
	resumedAt := time.Now()
	resumed := count()
	WaitFor(t, 30*time.Second, "rows written after SIGCONT", func() bool { return count() >= resumed+400 })
	cancel()
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("writer: %v", writeErr)
	}

	WaitFor(t, scale(60*time.Second), "every outbox row published", func() bool {
		var pending int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE status <> 'published'`).Scan(&pending)
		return pending == 0
	})
	run.Check()
	rep := CheckOutMessages(t, out.Collect(t), written)
	if rep.Duplicates > outboxInFlight {
		t.Errorf("WIRE DUPLICATES: %d re-publications after one pause, bound %d (the batches a's loops had in flight)", rep.Duplicates, outboxInFlight)
	}
	lost, fenced := metric(a, "inboxd_outbox_lease_lost_total"), metric(a, "inboxd_outbox_fenced_total")
	logged := a.LogCount("lease lost")
	if lost <= 0 && fenced <= 0 && logged == 0 {
		t.Errorf("NOT FENCED: after SIGCONT replica a shows no lost lease (%.0f), no fenced write (%.0f) and no 'lease lost' line", lost, fenced)
	}
	t.Logf("rows=%d wire=%d dups=%d a: lease_lost=%.0f fenced=%.0f", len(written), rep.Wire, rep.Duplicates, lost, fenced)
	run.Note("rows=%d stopped=%s wire=%d dups=%d bound=%d a_lease_lost=%.0f a_fenced=%.0f a_lease_lost_lines=%d",
		len(written), resumedAt.Sub(stoppedAt).Round(100*time.Millisecond), rep.Wire, rep.Duplicates, outboxInFlight, lost, fenced, logged)
}
