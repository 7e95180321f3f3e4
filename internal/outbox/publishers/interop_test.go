package publishers

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
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// The relay's messages as the most used third-party clients read them
// (internal/interop): kafkajs for Kafka, amqplib for RabbitMQ.

// interopRow is an outbox row the interop tests write and then look for.
type interopRow struct {
	eventID, key string
	headers      map[string]string
	payload      []byte
}

// writeRows inserts rows for dest with plain SQL, as any service would.
func writeRows(t *testing.T, db *pgtest.DB, dest string, rows []interopRow) {
	t.Helper()
	for _, r := range rows {
		hs, err := json.Marshal(r.headers)
		if err != nil {
			t.Fatal(err)
		}
		var key any
		if r.key != "" {
			key = r.key
		}
		if _, err := db.Pool.Exec(context.Background(),
			`INSERT INTO outbox (destination, event_id, event_type, key, headers, payload) VALUES ($1, $2, 'order.shipped', $3, $4, $5)`,
			dest, r.eventID, key, hs, r.payload); err != nil {
			t.Fatal(err)
		}
	}
}

// interopRows are n rows over three keys: JSON payloads that compress well
// (the relay's default codec must then still be one every client reads),
// and one of bytes that are not text, NUL and 0xff among them.
func interopRows(n int) []interopRow {
	var rows []interopRow
	for i := range n {
		payload := fmt.Appendf(nil, `{"order_id":%d,"status":"shipped","lines":[%s]}`, i,
			strings.TrimSuffix(strings.Repeat(`{"sku":"SKU-0001","qty":1,"price":"9.90"},`, 20), ","))
		if i == 3 {
			payload = []byte{0, 1, 2, 0xff, 0xfe, '\n', 0, 'x'}
		}
		rows = append(rows, interopRow{eventID: fmt.Sprintf("ev-%03d", i), key: fmt.Sprintf("order-%d", i%3),
			headers: map[string]string{"tenant": "acme", "note": "déjà vu ✓"}, payload: payload})
	}
	return rows
}

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
	b := setupKafkaPub(t, KafkaConfig{})
	topic := b.topic(t, 3, nil)
	rows := interopRows(30)
	writeRows(t, db, "kafka:"+topic, rows)
	startRelay(t, db, testConfig(), map[string]outbox.Publisher{outbox.KindKafka: b.pub})
	testkit.WaitFor(t, 20*time.Second, "every row published", func() bool { return count(t, db, "status = 'published'") == len(rows) })

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
		want[r.key] = append(want[r.key], r.eventID)
		m, ok := byID[r.eventID]
		if !ok {
			t.Errorf("%s: not read by kafkajs", r.eventID)
			continue
		}
		if m.Key == nil || *m.Key != r.key {
			t.Errorf("%s: key %v, want %q", r.eventID, m.Key, r.key)
		}
		if m.Headers[outbox.EventTypeHeader] != "order.shipped" {
			t.Errorf("%s: event_type %q", r.eventID, m.Headers[outbox.EventTypeHeader])
		}
		for k, v := range r.headers {
			if m.Headers[k] != v {
				t.Errorf("%s: header %s = %q, want %q", r.eventID, k, m.Headers[k], v)
			}
		}
		got, err := base64.StdEncoding.DecodeString(m.Value)
		if err != nil || !bytes.Equal(got, r.payload) {
			t.Errorf("%s: payload %q (%v), want %q", r.eventID, got, err, r.payload)
		}
	}
	for k, ids := range want {
		if strings.Join(order[k], ",") != strings.Join(ids, ",") {
			t.Errorf("key %s read in the order %v, want %v", k, order[k], ids)
		}
	}
}

// amqplib reads the standard properties of the relay's RabbitMQ messages
// from the row's headers of their names (content-type, content-encoding,
// correlation-id, reply-to, expiration, timestamp) as the properties
// (properties.contentType, …), not as entries of the headers table; the
// event id and type as message_id and type; the rest, the key among them,
// in the headers table.
func TestAmqplibReadsTheRelaysProperties(t *testing.T) {
	t.Parallel()
	node := testkit.NodeInterop(t)
	db := pgtest.New(t)
	ab := setupAMQPPub(t)
	props := map[string]string{
		"content-type": "application/json", "content-encoding": "identity", "correlation-id": "corr-7",
		"reply-to": "replies", "expiration": "600000", "timestamp": "2024-05-01T10:00:00Z",
	}
	hs := map[string]string{"tenant": "acme"}
	for k, v := range props {
		hs[k] = v
	}
	rows := []interopRow{
		{eventID: "with-props", key: "order-1", headers: hs, payload: []byte(`{"id":1}`)},
		{eventID: "without", key: "order-1", headers: map[string]string{"tenant": "acme"}, payload: []byte{0, 0xff}},
	}
	writeRows(t, db, "amqp:"+ab.exchange+"/rk", rows)
	ap := newAMQPPub(t, AMQPConfig{})
	startRelay(t, db, testConfig(), map[string]outbox.Publisher{outbox.KindAMQP: ap})
	testkit.WaitFor(t, 20*time.Second, "both rows published", func() bool { return count(t, db, "status = 'published'") == 2 })

	out := node.Run(t, 60*time.Second, "amqp_outbox_properties.js",
		[]string{"AMQP_URL=" + testkit.AMQPURL(), "QUEUE=" + ab.queue, "COUNT=2"})
	type message struct {
		Properties struct {
			ContentType     *string        `json:"contentType"`
			ContentEncoding *string        `json:"contentEncoding"`
			CorrelationID   *string        `json:"correlationId"`
			ReplyTo         *string        `json:"replyTo"`
			Expiration      *string        `json:"expiration"`
			Timestamp       *int64         `json:"timestamp"`
			MessageID       string         `json:"messageId"`
			Type            string         `json:"type"`
			DeliveryMode    int            `json:"deliveryMode"`
			Headers         map[string]any `json:"headers"`
		} `json:"properties"`
		Body string `json:"body"`
	}
	var got []message
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("amqplib printed %q: %v", line, err)
		}
		got = append(got, m)
	}
	if len(got) != 2 || got[0].Properties.MessageID != "with-props" || got[1].Properties.MessageID != "without" {
		t.Fatalf("read %+v, want with-props then without", got)
	}
	p := got[0].Properties
	str := func(s *string) string {
		if s == nil {
			return "<unset>"
		}
		return *s
	}
	for name, v := range map[string]string{"contentType": str(p.ContentType), "contentEncoding": str(p.ContentEncoding),
		"correlationId": str(p.CorrelationID), "replyTo": str(p.ReplyTo), "expiration": str(p.Expiration)} {
		if want := map[string]string{"contentType": "application/json", "contentEncoding": "identity", "correlationId": "corr-7",
			"replyTo": "replies", "expiration": "600000"}[name]; v != want {
			t.Errorf("properties.%s = %q, want %q", name, v, want)
		}
	}
	if p.Timestamp == nil || *p.Timestamp != time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC).Unix() {
		t.Errorf("properties.timestamp = %v, want 2024-05-01T10:00:00Z in seconds", p.Timestamp)
	}
	if p.Type != "order.shipped" || p.DeliveryMode != 2 {
		t.Errorf("type %q, delivery mode %d", p.Type, p.DeliveryMode)
	}
	for k := range props {
		if _, ok := p.Headers[k]; ok {
			t.Errorf("header %s is in the headers table too: %v", k, p.Headers)
		}
	}
	for k, v := range map[string]string{"tenant": "acme", outbox.EventIDHeader: "with-props", outbox.EventTypeHeader: "order.shipped", outbox.KeyHeader: "order-1"} {
		if p.Headers[k] != v {
			t.Errorf("headers table %s = %v, want %q", k, p.Headers[k], v)
		}
	}
	q := got[1].Properties
	if q.ContentType != nil || q.Timestamp != nil || q.Expiration != nil {
		t.Errorf("a row without those headers: content type %v, timestamp %v, expiration %v; want none set", q.ContentType, q.Timestamp, q.Expiration)
	}
	if body, _ := base64.StdEncoding.DecodeString(got[1].Body); !bytes.Equal(body, []byte{0, 0xff}) {
		t.Errorf("body %q", body)
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
