package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// The ordered scenario through the real binary: 1,000 keys × 20
// events on a 4-partition topic (a key stays on its partition, so offset
// order is arrival order), an ordered http route to a sink that answers
// slowly and fails one request in ten, two replicas in one consumer group,
// and one of them SIGKILLed mid-stream and restarted. For every key the
// sink sees each event's first success strictly in offset order.
func TestOrderedRouteAcrossReplicasAndAKill(t *testing.T) {
	t.Parallel()
	const keys, events = 1000, 20
	db := pgtest.New(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "orders"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)

	var mu sync.Mutex
	firsts := make(map[string][]int) // key → sequence numbers of first 2xx, in arrival order
	succeeded := make(map[string]bool)
	rnd := testkit.Rand(t) // the sink's delays and 503s
	s := newSink(t)
	s.SetHook(func(w http.ResponseWriter, _ *http.Request, req testkit.Delivery) bool {
		var body struct {
			Key string `json:"key"`
			Seq int    `json:"seq"`
		}
		if err := json.Unmarshal(req.Body, &body); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return true
		}
		time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond)
		if rnd.IntN(10) == 0 {
			http.Error(w, "flaky", http.StatusServiceUnavailable)
			return true
		}
		mu.Lock()
		if !succeeded[req.IdempotencyKey] {
			succeeded[req.IdempotencyKey] = true
			firsts[body.Key] = append(firsts[body.Key], body.Seq)
		}
		mu.Unlock()
		return false
	})
	routes := writeRoutes(t, "routes:\n  - type: order.event\n    handler: http\n    url: "+s.URL+
		"\n    ordered: true\n    max_attempts: 100\n    backoff_base: 20ms\n    backoff_max: 200ms\n")
	env := append(kafkaDaemonEnv(db, cluster, "orders", routes), "INBOXD_WORKERS=32")
	d1 := startDaemon(t, env...)
	startDaemon(t, env...)

	ctx := context.Background()
	for seq := range events {
		recs := make([]*kgo.Record, 0, keys)
		for k := range keys {
			key := fmt.Sprintf("k%04d", k)
			r := event(fmt.Sprintf("%s-%02d", key, seq), "order.event", fmt.Sprintf(`{"key":%q,"seq":%d}`, key, seq))
			r.Key = []byte(key)
			recs = append(recs, r)
		}
		if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if seq == events/2 {
			waitFor(t, 120*time.Second, "a fifth processed before the kill", func() bool {
				return countStatus(t, db, "processed") >= keys*events/5
			})
			d1.Kill()
			startDaemon(t, env...)
		}
	}
	waitFor(t, 240*time.Second, "every event processed", func() bool { return countStatus(t, db, "processed") == keys*events })

	mu.Lock()
	defer mu.Unlock()
	bad := 0
	for k := range keys {
		key := fmt.Sprintf("k%04d", k)
		got := firsts[key]
		inOrder := len(got) == events
		for i := 0; inOrder && i < len(got); i++ {
			inOrder = got[i] == i
		}
		if !inOrder {
			bad++
			if bad <= 5 {
				t.Errorf("key %s: first successes %v, want 0..%d in order", key, got, events-1)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d keys out of order", bad, keys)
	}
}
