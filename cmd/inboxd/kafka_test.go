package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// kafkaEnv starts an in-process Kafka-protocol cluster and returns it with a
// producer client.
func kafkaEnv(t *testing.T, partitions int32, topic string) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, cl
}

func event(id, typ, payload string) *kgo.Record {
	r := &kgo.Record{Key: []byte(id), Value: []byte(payload)}
	if id != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "event_id", Value: []byte(id)})
	}
	if typ != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "event_type", Value: []byte(typ)})
	}
	return r
}

func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func kafkaDaemonEnv(db *pgtest.DB, cluster *kfake.Cluster, topic, routes string) []string {
	return []string{
		"INBOXD_DATABASE_URL=" + db.URL,
		"INBOXD_KAFKA_BROKERS=" + strings.Join(cluster.ListenAddrs(), ","),
		"INBOXD_KAFKA_TOPICS=" + topic,
		"INBOXD_KAFKA_GROUP=it",
		"INBOXD_KAFKA_SESSION_TIMEOUT=1s",
		"INBOXD_ROUTES=" + routes,
		"INBOXD_LEASE=2s",
		"INBOXD_BACKOFF_BASE=50ms",
		"INBOXD_BACKOFF_MAX=200ms",
	}
}

// Kafka → inbox → HTTP sink through the real binary: every unique event is
// delivered with its id as Idempotency-Key and ends processed; duplicates
// are absorbed; a message without a type becomes a rejected row and does
// not hold its partition back.
func TestKafkaToSinkEndToEnd(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := newSink(t)
	cluster, cl := kafkaEnv(t, 2, "orders")
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: http\n    url: "+s.URL+"\n")
	startDaemon(t, kafkaDaemonEnv(db, cluster, "orders", routes)...)

	var recs []*kgo.Record
	for i := range 200 {
		recs = append(recs, event(fmt.Sprintf("o-%03d", i), "order.created", fmt.Sprintf(`{"n":%d}`, i)))
	}
	recs = append(recs, event("o-001", "order.created", `{"n":1}`), event("o-002", "order.created", `{"n":2}`))
	recs = append(recs, event("broken-1", "", `no type`))
	for i := 200; i < 220; i++ { // after the malformed message on its partition
		recs = append(recs, event(fmt.Sprintf("o-%03d", i), "order.created", `{}`))
	}
	produce(t, cl, recs...)

	waitFor(t, 30*time.Second, "all events processed", func() bool { return countStatus(t, db, "processed") == 220 })
	if n := countStatus(t, db, "rejected"); n != 1 {
		t.Fatalf("rejected rows = %d, want 1", n)
	}
	var reason string
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT last_error FROM inbox WHERE status = 'rejected' AND event_id LIKE 'orders/%/%'`).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "missing event type") {
		t.Fatalf("rejected reason = %q", reason)
	}
	for i := range 220 {
		key := fmt.Sprintf("orders/o-%03d", i)
		if got := s.ByKey(key); len(got) != 1 || got[0].Source != "orders" {
			t.Fatalf("%s delivered %d times: %+v", key, len(got), got)
		}
	}
	waitForCommitted(t, cluster, "it", "orders", 223)
}

// waitForCommitted waits until the group's committed offsets on topic add up
// to total messages (every message, malformed ones included, is behind the
// committed offsets).
func waitForCommitted(t *testing.T, cluster *kfake.Cluster, group, topic string, total int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	waitFor(t, 20*time.Second, "offsets committed past every message", func() bool {
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return false
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == topic {
				sum += o.At
			}
		})
		return sum == total
	})
}

// Two daemon processes in one consumer group split the partitions and
// together ingest and process every event exactly once.
func TestTwoDaemonsShareTheGroup(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := newSink(t)
	cluster, cl := kafkaEnv(t, 4, "orders")
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: http\n    url: "+s.URL+"\n")
	env := kafkaDaemonEnv(db, cluster, "orders", routes)
	d1 := startDaemon(t, env...)
	d2 := startDaemon(t, env...)

	// Both members hold partitions before we produce.
	adm := kadm.NewClient(cl)
	waitFor(t, 30*time.Second, "two members with partitions", func() bool {
		groups, err := adm.DescribeGroups(context.Background(), "it")
		if err != nil {
			return false
		}
		g := groups["it"]
		if len(g.Members) != 2 {
			return false
		}
		for _, m := range g.Members {
			a, ok := m.Assigned.AsConsumer()
			if !ok || len(a.Topics) == 0 || len(a.Topics[0].Partitions) == 0 {
				return false
			}
		}
		return true
	})

	const n = 1000
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, event(fmt.Sprintf("e-%04d", i), "order.created", `{}`))
	}
	produce(t, cl, recs...)
	waitFor(t, 60*time.Second, "every event processed", func() bool { return countStatus(t, db, "processed") == n })

	for i := range n {
		if got := len(s.ByKey(fmt.Sprintf("orders/e-%04d", i))); got != 1 {
			t.Fatalf("e-%04d delivered %d times", i, got)
		}
	}
	for i, d := range []*testkit.Daemon{d1, d2} {
		if !strings.Contains(d.Logs(), `"message":"processed"`) {
			t.Errorf("daemon %d processed nothing: the work was not shared", i+1)
		}
	}
	waitForCommitted(t, cluster, "it", "orders", n)
}

// SIGKILL of the daemon in the middle of a stream loses nothing: after a
// restart every event produced is in the inbox once and processed.
func TestSIGKILLMidStreamLosesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := newSink(t)
	cluster, cl := kafkaEnv(t, 4, "orders")
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: http\n    url: "+s.URL+"\n")
	env := kafkaDaemonEnv(db, cluster, "orders", routes)
	d := startDaemon(t, env...)

	const n = 4000
	var producedCount atomic.Int64
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		// A steady stream (about 5000 events/s), so the kill lands in it.
		pace := time.NewTicker(20 * time.Millisecond)
		defer pace.Stop()
		for start := 0; start < n; start += 100 {
			<-pace.C
			var recs []*kgo.Record
			for i := start; i < start+100; i++ {
				recs = append(recs, event(fmt.Sprintf("k-%05d", i), "order.created", `{}`))
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				done <- err
				return
			}
			producedCount.Add(100)
		}
		done <- nil
	}()

	// Kill while the stream is flowing and rows are being processed.
	waitFor(t, 30*time.Second, "stream under way", func() bool {
		return producedCount.Load() >= n/4 && countStatus(t, db, "processed") > 0
	})
	d.Kill()
	if got := producedCount.Load(); got == n {
		t.Fatalf("the producer had finished before the kill: not a mid-stream kill")
	}
	startDaemon(t, env...)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "every event processed after restart", func() bool {
		return countStatus(t, db, "processed") == n
	})
	var rows int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Fatalf("inbox has %d rows, want %d", rows, n)
	}
	for i := range n {
		if len(s.ByKey(fmt.Sprintf("orders/k-%05d", i))) == 0 {
			t.Fatalf("k-%05d never delivered", i)
		}
	}
	waitForCommitted(t, cluster, "it", "orders", n)
}
