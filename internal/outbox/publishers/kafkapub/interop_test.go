package kafkapub

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/pubtest"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// The relay's messages as the most used third-party Kafka client,
// kafkajs, reads them (internal/interop).

// consumed is one message as an interop script printed it.
type consumed struct {
	Partition int               `json:"partition"`
	Offset    string            `json:"offset"`
	Key       *string           `json:"key"`
	Headers   map[string]string `json:"headers"`
	Value     string            `json:"value"`
}

// A stock kafkajs consumer (no compression plug-in) reads what the relay
// published to Kafka (kfake): every row's event id, type, key, headers and
// payload bytes intact, each key's rows in their order. Before the relay
// chose a codec, franz-go's default (snappy) made kafkajs fail with
// "KafkaJSNotImplemented: Snappy compression not implemented".
func TestKafkaJSReadsTheRelaysMessages(t *testing.T) {
	t.Parallel()
	node := testkit.NodeInterop(t)
	db := pgtest.New(t)
	b := setupKafkaPub(t, Config{})
	topic := b.topic(t, 3, nil)
	rows := pubtest.InteropRows(30)
	pubtest.WriteRows(t, db, "kafka:"+topic, rows)
	pubtest.StartRelay(t, db, pubtest.RelayConfig(), map[string]outbox.Publisher{outbox.KindKafka: b.pub})
	testkit.WaitFor(t, 20*time.Second, "every row published", func() bool { return pubtest.Count(t, db, "status = 'published'") == len(rows) })

	if codecs := b.batchCodecs(t, topic, len(rows)); !codecs[1] {
		t.Errorf("the relay's batches have the codecs %v, want gzip (1) among them: the default codec, which kafkajs must read", codecs)
	}

	out := node.Run(t, 90*time.Second, "kafka_outbox_consume.js",
		[]string{"BROKERS=" + strings.Join(b.brokers, ","), "TOPIC=" + topic, fmt.Sprintf("COUNT=%d", len(rows))})
	byID := map[string]consumed{}
	order := map[string][]string{} // key → event ids in (partition, offset) order, per partition as read
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m consumed
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("kafkajs printed %q: %v", line, err)
		}
		id := m.Headers[outbox.EventIDHeader]
		if _, dup := byID[id]; dup {
			continue // at least once: a duplicate is allowed, not counted twice
		}
		byID[id] = m
		if m.Key != nil {
			order[*m.Key] = append(order[*m.Key], id)
		}
	}
	want := map[string][]string{}
	for _, r := range rows {
		want[r.Key] = append(want[r.Key], r.EventID)
		m, ok := byID[r.EventID]
		if !ok {
			t.Errorf("%s: not read by kafkajs", r.EventID)
			continue
		}
		if m.Key == nil || *m.Key != r.Key {
			t.Errorf("%s: key %v, want %q", r.EventID, m.Key, r.Key)
		}
		if m.Headers[outbox.EventTypeHeader] != "order.shipped" {
			t.Errorf("%s: event_type %q", r.EventID, m.Headers[outbox.EventTypeHeader])
		}
		for k, v := range r.Headers {
			if m.Headers[k] != v {
				t.Errorf("%s: header %s = %q, want %q", r.EventID, k, m.Headers[k], v)
			}
		}
		got, err := base64.StdEncoding.DecodeString(m.Value)
		if err != nil || !bytes.Equal(got, r.Payload) {
			t.Errorf("%s: payload %q (%v), want %q", r.EventID, got, err, r.Payload)
		}
	}
	for k, ids := range want {
		if strings.Join(order[k], ",") != strings.Join(ids, ",") {
			t.Errorf("key %s read in the order %v, want %v", k, order[k], ids)
		}
	}
}

// batchCodecs reads the n records of topic and returns the codecs of the
// batches they came in (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
func (b *kafkaBundle) batchCodecs(t *testing.T, topic string, n int) map[uint8]bool {
	t.Helper()
	h := &codecHook{seen: map[uint8]bool{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(h))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for read := 0; read < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records of %d: %v", read, n, ctx.Err())
		}
		read += fs.NumRecords()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen
}

// codecHook notes the codecs of the batches a consumer fetches.
type codecHook struct {
	mu   sync.Mutex
	seen map[uint8]bool
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (h *codecHook) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen[m.CompressionType] = true
}
