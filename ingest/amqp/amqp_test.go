package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/brokers/amqpconn"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/amqpmap"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/inboxd/inboxd/internal/netfault"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// amqpBundle is one test's queue on the real RabbitMQ, a publisher and a
// database.
type amqpBundle struct {
	queue string
	conn  *amqp.Connection
	ch    *amqp.Channel
	db    *pgtest.DB
}

// setupAMQP declares a queue of the test's own and deletes it when the test
// ends.
func setupAMQP(t testing.TB) *amqpBundle {
	t.Helper()
	conn, err := amqp.Dial(testkit.AMQPURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s (start it with rabbitmq-server -detached): %v", amqpconn.RedactURL(testkit.AMQPURL()), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	name := "inboxd-test-" + strings.ToLower(strings.NewReplacer("/", "-").Replace(t.Name())) + "-" + hex.EncodeToString(suffix[:])
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	b := &amqpBundle{queue: name, conn: conn, ch: ch, db: pgtest.New(t)}
	t.Cleanup(func() {
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", name, err)
		}
		_ = conn.Close()
	})
	return b
}

// publish publishes msgs to the queue (default exchange) and waits for the
// broker's confirmations.
func (b *amqpBundle) publish(t testing.TB, msgs ...amqp.Publishing) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range msgs {
		dc, err := b.ch.PublishWithDeferredConfirmWithContext(ctx, "", b.queue, true, false, m)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

// ready is how many messages wait in the queue (not counting deliveries
// held unacknowledged by a consumer).
func (b *amqpBundle) ready(t testing.TB) int {
	t.Helper()
	q, err := b.ch.QueueDeclarePassive(b.queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

func (b *amqpBundle) config() Config {
	return Config{URL: testkit.AMQPURL(), Queues: []string{b.queue},
		Pipeline: ingest.PipelineConfig{RetryBackoffMin: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond,
			Mapping: ingest.MapOptions{MaxPayload: 1024}}}
}

// startAMQP runs s until the test ends (or stop is called).
func startAMQP(t testing.TB, s *amqpSource) (stop func() error) {
	t.Helper()
	return startSource(t, s.Run)
}

// queueConn is the connection consuming the i-th queue of s, nil while
// it is not consumed.
func (s *amqpSource) queueConn(i int) *amqp.Connection {
	q := s.queues[i]
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.session == nil {
		return nil
	}
	return q.session.conn
}

func amqpEvent(id, typ, body string) amqp.Publishing {
	return amqp.Publishing{MessageId: id, Type: typ, Body: []byte(body), DeliveryMode: amqp.Persistent}
}

// Deliveries land in the inbox once each, duplicates absorbed, with every
// column as the mapping table says; the queue ends empty: everything was
// acknowledged.
func TestAMQPDeliveryExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	const n = 200
	var msgs []amqp.Publishing
	for i := range n {
		msgs = append(msgs, amqpEvent(fmt.Sprintf("e-%d", i), "order.created", fmt.Sprintf(`{"n":%d}`, i)))
		if i%10 == 0 { // 10 % duplicates
			msgs = append(msgs, amqpEvent(fmt.Sprintf("e-%d", i), "order.created", `{"again":true}`))
		}
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	msgs = append(msgs,
		amqp.Publishing{Body: []byte("by headers"), ContentType: "application/json", CorrelationId: "c-1", Timestamp: ts,
			Headers: amqp.Table{"event_id": "h-1", "event_type": "order.paid", "key": "order-7", "attempt": int32(3)}},
		amqp.Publishing{MessageId: "p-1", Type: "order.paid", Body: []byte("by properties"),
			Headers: amqp.Table{"event_id": "ignored", "event_type": "ignored"}},
	)
	b.publish(t, msgs...)

	s, err := newAMQP(b.config(), ingestcore.PGWriter{Pool: b.db.Pool}, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	stop := startAMQP(t, s)
	waitFor(t, 30*time.Second, func() (bool, string) {
		got := len(readRows(t, b.db))
		return got == n+2, fmt.Sprintf("%d rows, want %d", got, n+2)
	})
	waitFor(t, 10*time.Second, func() (bool, string) { return s.Ready(), "ready" })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if left := b.ready(t); left != 0 {
		t.Errorf("%d messages back in the queue after the source stopped: not all were acknowledged", left)
	}
	rows := readRows(t, b.db)
	if r := rows[b.queue+" e-10"]; string(r.Payload) != `{"n":10}` || r.Status != ingestcore.StatusReceived || r.EventType != "order.created" {
		t.Errorf("e-10 = %+v", r)
	}
	h := rows[b.queue+" h-1"]
	if h.EventType != "order.paid" || string(h.Key) != "order-7" || h.Headers["content-type"] != "application/json" ||
		h.Headers["correlation-id"] != "c-1" || h.Headers["timestamp"] != "2026-01-02T03:04:05Z" || h.Headers["attempt"] != "3" {
		t.Errorf("h-1 = %+v", h)
	}
	if p, ok := rows[b.queue+" p-1"]; !ok || p.EventType != "order.paid" || string(p.Key) != b.queue {
		t.Errorf("p-1 (message_id and type properties win, key is the routing key) = %+v, present %v", p, ok)
	}
	if got := testutil.ToFloat64(s.Metrics.Duplicates); got != n/10 {
		t.Errorf("duplicates = %v, want %d", got, n/10)
	}
	// A RabbitMQ row has no Kafka position: its kafka_* columns are NULL,
	// not a made-up topic, partition 0 and offset 0.
	var withPosition int
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox
		WHERE kafka_topic IS NOT NULL OR kafka_partition IS NOT NULL OR kafka_offset IS NOT NULL`).Scan(&withPosition); err != nil {
		t.Fatal(err)
	}
	if withPosition != 0 {
		t.Errorf("%d RabbitMQ rows carry a Kafka position", withPosition)
	}
}

// A queue that does not exist is a start-up error naming it.
func TestAMQPMissingQueue(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	cfg := b.config()
	cfg.Queues = []string{b.queue, b.queue + "-missing"}
	s, err := newAMQP(cfg, ingestcore.PGWriter{Pool: b.db.Pool}, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = s.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), `"`+b.queue+`-missing"`) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Run = %v, want an error naming the missing queue", err)
	}
}

// killWriter writes through to the database, then, the first time a batch
// holds a delivery, closes the source's connection before Run can
// acknowledge it: the broker must deliver the batch again.
type killWriter struct {
	inner  ingestcore.InboxWriter
	s      atomic.Pointer[amqpSource]
	killed atomic.Bool
}

func (w *killWriter) WriteBatch(ctx context.Context, rows []ingestcore.Row) (int, error) {
	n, err := w.inner.WriteBatch(ctx, rows)
	if err == nil && w.killed.CompareAndSwap(false, true) {
		_ = w.s.Load().queueConn(0).Close()
	}
	return n, err
}

// The acknowledgement comes only after the insert committed: a connection
// lost between the two makes the broker deliver the batch again, the
// source reconnects, and the redelivery adds no row (a malformed message's
// rejected row included).
func TestAMQPAckOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	var msgs []amqp.Publishing
	for i := range 20 {
		msgs = append(msgs, amqpEvent(fmt.Sprintf("e-%d", i), "order.created", "x"))
	}
	msgs = append(msgs, amqp.Publishing{Type: "order.created", Body: []byte("no id")}, amqpEvent("e-big", "t", strings.Repeat("B", 2000)))
	b.publish(t, msgs...)

	w := &killWriter{inner: ingestcore.PGWriter{Pool: b.db.Pool}}
	cfg := b.config()
	cfg.Pipeline.BatchSize = 1000
	cfg.Pipeline.BatchTimeout = 200 * time.Millisecond
	cfg.Pipeline.Linger = 200 * time.Millisecond // the first batch holds everything
	s, err := newAMQP(cfg, w, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w.s.Store(s)
	stop := startAMQP(t, s)
	waitFor(t, 30*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(s.Metrics.MessagesFetched)
		return n >= 2*float64(len(msgs)) && testutil.ToFloat64(s.Metrics.Reconnects) >= 1 && s.Ready(),
			fmt.Sprintf("%v fetched, %v reconnects, ready %v", n, testutil.ToFloat64(s.Metrics.Reconnects), s.Ready())
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if left := b.ready(t); left != 0 {
		t.Errorf("%d messages back in the queue: the redelivery was not acknowledged", left)
	}
	rows := readRows(t, b.db) // fails on a second row for one (source, event_id)
	if len(rows) != len(msgs) {
		t.Errorf("%d rows, want %d", len(rows), len(msgs))
	}
	rejected := 0
	for _, r := range rows {
		if r.Status == ingestcore.StatusRejected {
			rejected++
			if !strings.HasPrefix(r.EventID, b.queue+"/sha256/") {
				t.Errorf("rejected row id %q, want one derived from the message", r.EventID)
			}
		}
	}
	if rejected != 2 {
		t.Errorf("%d rejected rows, want 2 (no id, oversize)", rejected)
	}
	if got := testutil.ToFloat64(s.Metrics.Duplicates); got < float64(len(msgs)) {
		t.Errorf("duplicates = %v, want the whole redelivered batch (%d)", got, len(msgs))
	}
}

// A connection lost while idle is opened again (counted), readiness false
// meanwhile, and consuming goes on.
func TestAMQPReconnects(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	s, err := newAMQP(b.config(), ingestcore.PGWriter{Pool: b.db.Pool}, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startAMQP(t, s)
	b.publish(t, amqpEvent("before", "t", "1"))
	waitFor(t, 20*time.Second, func() (bool, string) { return len(readRows(t, b.db)) == 1 && s.Ready(), "first row, ready" })

	_ = s.queueConn(0).Close()
	waitFor(t, 20*time.Second, func() (bool, string) {
		return testutil.ToFloat64(s.Metrics.Reconnects) == 1 && s.Ready(), "reconnected and ready"
	})
	b.publish(t, amqpEvent("after", "t", "2"))
	waitFor(t, 20*time.Second, func() (bool, string) {
		_, ok := readRows(t, b.db)[b.queue+" after"]
		return ok, "row published after the reconnection"
	})
}

// MapDelivery gives a malformed message the same rejected id on every
// delivery, and different messages different ids.
func TestMapDeliveryRejectIDIsStable(t *testing.T) {
	t.Parallel()
	d := amqp.Delivery{RoutingKey: "q", Body: []byte("no id"), Type: "t", DeliveryTag: 1}
	r1 := amqpmap.MapDelivery("q", d, ingest.MapOptions{})
	d.DeliveryTag, d.Redelivered = 7, true
	r2 := amqpmap.MapDelivery("q", d, ingest.MapOptions{})
	d.Body = []byte("other")
	r3 := amqpmap.MapDelivery("q", d, ingest.MapOptions{})
	if r1.Status != ingestcore.StatusRejected || r1.Reason != ingestcore.RejectMissingID || r1.EventID != r2.EventID || r1.EventID == r3.EventID {
		t.Errorf("ids %q %q %q (%+v)", r1.EventID, r2.EventID, r3.EventID, r1)
	}
	if r1.LastError != "missing event id (property message_id; headers event_id, ce_id)" {
		t.Errorf("last_error = %q", r1.LastError)
	}
	if string(r1.Headers) != `{"amqp-type":"t"}` || r1.EventType != "t" {
		t.Errorf("rejected row headers %s, type %q: the type property is not kept", r1.Headers, r1.EventType)
	}
	d = amqp.Delivery{MessageId: "bad\x00id", Type: "t"}
	if r := amqpmap.MapDelivery("q", d, ingest.MapOptions{}); r.Reason != ingestcore.RejectInvalidID || !strings.Contains(r.LastError, "property message_id") {
		t.Errorf("invalid message_id: %+v", r)
	}
}

// A consumer cancelled by the server (its queue deleted) is logged, makes
// the source not ready, and the source consumes again once the queue is
// back.
func TestAMQPConsumerCancelled(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	var logs syncBuffer
	s, err := newAMQP(b.config(), ingestcore.PGWriter{Pool: b.db.Pool}, zerolog.New(&logs), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startAMQP(t, s)
	waitFor(t, 20*time.Second, func() (bool, string) { return s.Ready(), "ready" })
	if _, err := b.ch.QueueDelete(b.queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		return !s.Ready() && strings.Contains(logs.String(), "RabbitMQ cancelled the consumer"), "not ready, cancellation logged"
	})
	if _, err := b.ch.QueueDeclare(b.queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	b.publish(t, amqpEvent("back", "t", "1"))
	waitFor(t, 20*time.Second, func() (bool, string) {
		_, ok := readRows(t, b.db)[b.queue+" back"]
		return ok && s.Ready(), "consuming again once the queue is back"
	})
}

func TestAMQPConfigValidate(t *testing.T) {
	t.Parallel()
	cfg := Config{URL: "amqp://u:s3cret@host/", Queues: []string{"a", "a"}, Prefetch: -1,
		TLS: ingest.TLSConfig{CAFile: "ca.pem", CertFile: "c.pem"}}.withDefaults()
	cfg.Prefetch = -1
	err := cfg.validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"listed twice", "INBOXD_AMQP_PREFETCH", "is not amqps://", "set together"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error repeats the password: %q", err)
	}
	if got := amqpconn.RedactURL("amqps://u:s3cret@host:5671/vh"); got != "amqps://u@host:5671/vh" {
		t.Errorf("RedactAMQPURL = %q", got)
	}
}

// Two replicas on one queue: the broker shares the deliveries between them,
// and every event is one row, none lost, none doubled.
func TestAMQPTwoReplicasOnOneQueue(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	cfg := b.config()
	cfg.Prefetch = 20 // so that both replicas get deliveries
	var replicas []*amqpSource
	for range 2 {
		s, err := newAMQP(cfg, ingestcore.PGWriter{Pool: b.db.Pool}, testLogger(t), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		startAMQP(t, s)
		replicas = append(replicas, s)
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		return replicas[0].Ready() && replicas[1].Ready(), "both replicas ready"
	})
	const n = 1000
	var msgs []amqp.Publishing
	for i := range n {
		msgs = append(msgs, amqpEvent(fmt.Sprintf("e-%d", i), "t", "x"))
		if i%10 == 0 {
			msgs = append(msgs, amqpEvent(fmt.Sprintf("e-%d", i), "t", "dup"))
		}
	}
	b.publish(t, msgs...)
	waitFor(t, 60*time.Second, func() (bool, string) {
		got := len(readRows(t, b.db))
		return got == n, fmt.Sprintf("%d rows, want %d", got, n)
	})
	f0, f1 := testutil.ToFloat64(replicas[0].Metrics.MessagesFetched), testutil.ToFloat64(replicas[1].Metrics.MessagesFetched)
	if f0 == 0 || f1 == 0 || f0+f1 != float64(len(msgs)) {
		t.Errorf("replicas fetched %v and %v of %d deliveries", f0, f1, len(msgs))
	}
	waitFor(t, 10*time.Second, func() (bool, string) { return b.ready(t) == 0, "nothing waiting in the queue" })
}

// Kafka and RabbitMQ sources in one registry share the ingest metrics,
// each under its own source_kind.
func TestMetricsNameTheSourceKind(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	k, err := ingestcore.NewMetrics(reg, ingest.SourceKafka)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ingestcore.NewMetrics(reg, ingest.SourceAMQP)
	if err != nil {
		t.Fatal(err)
	}
	k.MessagesFetched.Add(2)
	a.MessagesFetched.Add(3)
	a.Ready.Set(1)
	a.Rejected.WithLabelValues(string(ingestcore.RejectMissingID)).Inc()
	want := `
# HELP inboxd_ingest_messages_fetched_total Messages fetched from the source.
# TYPE inboxd_ingest_messages_fetched_total counter
inboxd_ingest_messages_fetched_total{source_kind="amqp"} 3
inboxd_ingest_messages_fetched_total{source_kind="kafka"} 2
# HELP inboxd_ingest_ready 1 while ingest runs, its last batch write succeeded and the brokers answer.
# TYPE inboxd_ingest_ready gauge
inboxd_ingest_ready{source_kind="amqp"} 1
inboxd_ingest_ready{source_kind="kafka"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "inboxd_ingest_messages_fetched_total", "inboxd_ingest_ready"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(a.Rejected.WithLabelValues(string(ingestcore.RejectMissingID))); got != 1 {
		t.Errorf("amqp missing_id = %v", got)
	}
	if got := testutil.ToFloat64(k.Rejected.WithLabelValues(string(ingestcore.RejectMissingID))); got != 0 {
		t.Errorf("kafka missing_id = %v, want 0", got)
	}
}

// connection.blocked (a memory or disk alarm) makes the source not ready,
// with a log line that says why, until connection.unblocked.
func TestAMQPBlockedConnectionIsNotReady(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	var logs syncBuffer
	s, err := newAMQP(b.config(), ingestcore.PGWriter{Pool: b.db.Pool}, zerolog.New(&logs), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startAMQP(t, s)
	waitFor(t, 20*time.Second, func() (bool, string) { return s.Ready(), "ready" })
	s.queues[0].onBlocked(amqp.Blocking{Active: true, Reason: "low on memory"})
	if s.Ready() || testutil.ToFloat64(s.Metrics.Ready) != 0 {
		t.Error("ready while the connection is blocked")
	}
	if !strings.Contains(logs.String(), "memory or disk alarm") || !strings.Contains(logs.String(), "low on memory") {
		t.Errorf("no log line for the block: %s", logs.String())
	}
	s.queues[0].onBlocked(amqp.Blocking{Active: false})
	if !s.Ready() || testutil.ToFloat64(s.Metrics.Ready) != 1 {
		t.Error("not ready once unblocked")
	}
}

// A rejected RabbitMQ row maps again by RabbitMQ's rules (its message_id
// property first), a Kafka row by Kafka's.
func TestRemapRejectedUsesTheSourceRules(t *testing.T) {
	t.Parallel()
	d := amqp.Delivery{MessageId: "m-1", Body: []byte("b"), RoutingKey: "rk", Headers: amqp.Table{"kind": "order.created"}}
	rejected := amqpmap.MapDelivery("q", d, ingest.MapOptions{})
	if rejected.Reason != ingestcore.RejectMissingType {
		t.Fatalf("first mapping: %+v", rejected)
	}
	// As the CLI reads the row back: key, payload and decoded headers.
	var hs []kafka.Header
	var obj map[string]string
	if err := json.Unmarshal(rejected.Headers, &obj); err != nil {
		t.Fatal(err)
	}
	for k, v := range obj {
		hs = append(hs, kafka.Header{Key: k, Value: []byte(v)})
	}
	m := kafka.Message{Topic: "q", Key: rejected.Key, Value: rejected.Payload, Headers: hs}
	fixed := ingest.MapOptions{EventTypeHeaders: []string{"kind"}}
	row := remapRejected(rejected.EventID, m, fixed)
	if row.Status != ingestcore.StatusReceived || row.EventID != "m-1" || row.EventType != "order.created" {
		t.Errorf("AMQP row mapped again: %+v", row)
	}
	if k := kafkamap.MapMessage(m, fixed); k.Status != ingestcore.StatusRejected {
		t.Errorf("by Kafka's rules it would have been accepted too: %+v (the test proves nothing)", k)
	}
	km := kafka.Message{Topic: "orders", Partition: 1, Offset: 5, Headers: []kafka.Header{{Key: "event_id", Value: []byte("e")}, {Key: "event_type", Value: []byte("t")}}}
	if row := remapRejected(ingestcore.KafkaPositionID("orders", 1, 5), km, ingest.MapOptions{}); row.Status != ingestcore.StatusReceived || row.EventID != "e" {
		t.Errorf("Kafka row mapped again: %+v", row)
	}
}

// A RabbitMQ reject reason names the properties and headers looked at, in
// the order they are looked at: the message_id (type) property first.
func TestAMQPRejectReasonsNameWhatWasLookedAt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		d    amqp.Delivery
		opts ingest.MapOptions
		want string
	}{
		{"no id", amqp.Delivery{Type: "t", Body: []byte("x")}, ingest.MapOptions{},
			"missing event id (property message_id; headers event_id, ce_id)"},
		{"no type", amqp.Delivery{MessageId: "m", Body: []byte("x")}, ingest.MapOptions{},
			"missing event type (property type; headers event_type, ce_type)"},
		{"neither, JSON fields and headers configured", amqp.Delivery{Body: []byte(`{"n":1}`)},
			ingest.MapOptions{EventIDHeaders: []string{"x-id"}, EventIDJSONField: "id", EventTypeHeaders: []string{"x-type", "kind"}, EventTypeJSONField: "type"},
			"missing event id (property message_id; header x-id; JSON field id); " +
				"missing event type (property type; headers x-type, kind; JSON field type)"},
		{"no header configured", amqp.Delivery{Type: "t"}, ingest.MapOptions{EventIDHeaders: []string{}},
			"missing event id (property message_id)"},
		{"invalid id in a header", amqp.Delivery{Type: "t", Headers: amqp.Table{"ce_id": "a\x00b"}}, ingest.MapOptions{},
			"invalid event id in header ce_id (after property message_id; header event_id): contains a NUL byte"},
	}
	for _, c := range cases {
		r := amqpmap.MapDelivery("q", c.d, c.opts)
		if r.Status != ingestcore.StatusRejected || r.LastError != c.want {
			t.Errorf("%s: %s %q, want rejected %q", c.name, r.Status, r.LastError, c.want)
		}
	}
}

// declare declares another queue of the test's own (args: its arguments,
// nil for a classic queue), deleted when the test ends.
func (b *amqpBundle) declare(t testing.TB, suffix string, args amqp.Table) string {
	t.Helper()
	name := b.queue + "-" + suffix
	if _, err := b.ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := b.ch.QueueDelete(name, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", name, err)
		}
	})
	return name
}

// publishTo publishes msgs to queue and waits for the broker's
// confirmations.
func (b *amqpBundle) publishTo(t testing.TB, queue string, msgs ...amqp.Publishing) {
	t.Helper()
	q := b.queue
	b.queue = queue
	defer func() { b.queue = q }()
	b.publish(t, msgs...)
}

// messagesIn is how many messages wait in queue.
func (b *amqpBundle) messagesIn(t testing.TB, queue string) int {
	t.Helper()
	q, err := b.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// wideHeaders is a headers table of n entries: RabbitMQ accepts it,
// amqp091-go refuses to read one of more than 8,192.
func wideHeaders(n int) amqp.Table {
	t := amqp.Table{}
	for i := range n {
		t[fmt.Sprintf("h%d", i)] = nil
	}
	return t
}

// deepHeaders is a headers table whose entry "n" nests tables levels deep:
// amqp091-go refuses to read more than 32.
func deepHeaders(levels int) amqp.Table {
	inner := amqp.Table{"leaf": "x"}
	for range levels - 1 {
		inner = amqp.Table{"n": inner}
	}
	return amqp.Table{"n": inner}
}

// A message whose headers table amqp091-go cannot read (8,193 entries;
// tables 33 deep), which RabbitMQ accepts, is one rejected row saying why;
// the healthy messages around it, on its queue and on another, are stored
// at once, the source never reconnects and stays ready, and every message
// is acknowledged.
func TestAMQPUnreadableHeadersAreOneRejectedRow(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	other := b.declare(t, "other", nil)
	var logs syncBuffer
	cfg := b.config()
	cfg.Queues = []string{b.queue, other}
	s, err := newAMQP(cfg, ingestcore.PGWriter{Pool: b.db.Pool}, testLoggerTo(t, &logs), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var healthy []string
	event := func(id string) amqp.Publishing {
		healthy = append(healthy, id)
		return amqpEvent(id, "order.created", "ok")
	}
	wide := amqp.Publishing{MessageId: "poison-wide", Type: "order.created", Body: []byte("w"), Headers: wideHeaders(8193)}
	deep := amqp.Publishing{MessageId: "poison-deep", Type: "order.created", Body: []byte("d"), Headers: deepHeaders(33)}
	b.publishTo(t, b.queue, event("a-1"), event("a-2"), event("a-3"), wide, event("a-4"), event("a-5"), event("a-6"), deep)
	b.publishTo(t, other, event("b-1"), event("b-2"), event("b-3"), event("b-4"), event("b-5"), event("b-6"))

	start := time.Now()
	stop := startAMQP(t, s)
	waitFor(t, 20*time.Second, func() (bool, string) {
		rows := readRows(t, b.db)
		stored := 0
		for _, id := range healthy {
			q := b.queue
			if strings.HasPrefix(id, "b-") {
				q = other
			}
			if rows[q+" "+id].Status == ingestcore.StatusReceived {
				stored++
			}
		}
		rejected := 0
		for _, r := range rows {
			if r.Status == ingestcore.StatusRejected {
				rejected++
			}
		}
		return stored == len(healthy) && rejected == 2,
			fmt.Sprintf("healthy messages: %d of %d stored; %d rejected rows, want 2; %v reconnects",
				stored, len(healthy), rejected, testutil.ToFloat64(s.Metrics.Reconnects))
	})
	t.Logf("the %d healthy messages and the 2 rejected rows stored %v after the start", len(healthy), time.Since(start).Round(time.Millisecond))
	if !s.Ready() {
		t.Error("not ready although every queue is consumed")
	}
	if n := testutil.ToFloat64(s.Metrics.Reconnects); n != 0 {
		t.Errorf("%v reconnects: the unreadable message cost a connection", n)
	}
	if n := testutil.ToFloat64(s.Metrics.Rejected.WithLabelValues(string(ingestcore.RejectOversize))); n != 2 {
		t.Errorf("rejected_total{reason=oversize} = %v, want 2", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, q := range cfg.Queues {
		if left := b.messagesIn(t, q); left != 0 {
			t.Errorf("%d messages back in %s after the source stopped: not all were acknowledged", left, q)
		}
	}
	want := map[string]string{
		"w": "headers of 56241 bytes exceed what the client reads: a table of 8193 entries, more than the 8192 amqp091-go reads",
		"d": "headers of 242 bytes exceed what the client reads: tables nested more than the 32 levels amqp091-go reads",
	}
	for _, r := range readRows(t, b.db) {
		if r.Status != ingestcore.StatusRejected {
			continue
		}
		if r.Source != b.queue || !strings.HasPrefix(r.EventID, b.queue+"/sha256/") {
			t.Errorf("rejected row %s %s: want the poisoned queue and an id derived from the message", r.Source, r.EventID)
		}
		if w := want[string(r.Payload)]; r.LastError == nil || !strings.Contains(*r.LastError, w) {
			t.Errorf("rejected row %q: last_error %v, want it to say %q", r.Payload, deref(r.LastError), w)
		}
		if _, ok := r.Headers[amqpmap.AMQPMessageIDHeader]; !ok || r.Headers["h1"] != nil || r.Headers["n"] != nil {
			t.Errorf("rejected row %q: headers %v, want the properties and none of the unreadable table", r.Payload, r.Headers)
		}
		if ingestcore.Unstored(deref(r.LastError)) == nil {
			t.Errorf("rejected row %q: Unstored(%q) does not say its headers were not stored", r.Payload, deref(r.LastError))
		}
	}
	if !strings.Contains(logs.String(), "headers table the RabbitMQ client cannot read") {
		t.Errorf("no log line for the unreadable headers: %s", logs.String())
	}
}

// testLoggerTo logs to the test and to logs.
func testLoggerTo(t testing.TB, logs *syncBuffer) zerolog.Logger {
	return zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.InfoLevel)
}

// A queue that fails (deleted under the consumer, so that its consumer is
// cancelled and it cannot be consumed again) does not stop the others:
// their messages are still stored, readiness is false while a queue is
// not consumed, and when the queue is back its reconnection is counted and
// the source is ready again.
func TestAMQPOneQueueFailingDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	gone := b.declare(t, "gone", nil)
	cfg := b.config()
	cfg.Queues = []string{gone, b.queue}
	s, err := newAMQP(cfg, ingestcore.PGWriter{Pool: b.db.Pool}, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startAMQP(t, s)
	waitFor(t, 20*time.Second, func() (bool, string) { return s.Ready(), "ready" })
	if _, err := b.ch.QueueDelete(gone, false, false, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() (bool, string) { return !s.Ready(), "not ready once a queue is gone" })
	b.publish(t, amqpEvent("while-gone", "t", "1"))
	waitFor(t, 20*time.Second, func() (bool, string) {
		_, ok := readRows(t, b.db)[b.queue+" while-gone"]
		return ok, "the other queue's message stored while the first queue is gone"
	})
	if s.Ready() {
		t.Error("ready while a queue is not consumed")
	}
	if _, err := b.ch.QueueDeclare(gone, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	b.publishTo(t, gone, amqpEvent("back", "t", "2"))
	waitFor(t, 20*time.Second, func() (bool, string) {
		_, ok := readRows(t, b.db)[gone+" back"]
		return ok && s.Ready() && testutil.ToFloat64(s.Metrics.Reconnects) >= 1,
			fmt.Sprintf("stored %v, ready %v, reconnects %v", ok, s.Ready(), testutil.ToFloat64(s.Metrics.Reconnects))
	})
}

// cutWriter writes through to the database, then, the first time a batch
// holds a rejected row, cuts every connection through the proxy before
// the batch can be acknowledged: the broker delivers it again.
type cutWriter struct {
	inner ingestcore.InboxWriter
	proxy *netfault.Proxy
	cut   atomic.Bool
}

func (w *cutWriter) WriteBatch(ctx context.Context, rows []ingestcore.Row) (int, error) {
	n, err := w.inner.WriteBatch(ctx, rows)
	if err != nil {
		return n, err
	}
	for _, r := range rows {
		if r.Status == ingestcore.StatusRejected && w.cut.CompareAndSwap(false, true) {
			w.proxy.CutConnections()
			break
		}
	}
	return n, err
}

// On a quorum queue, a malformed message (no id) and an unreadable one,
// redelivered after their rows committed but before the acknowledgement
// (the connection cut between the two) come back with x-delivery-count: 1,
// and still make one rejected row each.
func TestAMQPQuorumRedeliveryIsOneRejectedRow(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	q := b.declare(t, "quorum", amqp.Table{"x-queue-type": "quorum"})
	cfg := b.config()
	cfg.Queues = []string{q}
	proxy, proxiedURL := testkit.ProxyTo(t, cfg.URL)
	cfg.URL = proxiedURL
	// A batch closes at 3 rows, never on time: the first holds the three
	// messages, the second their three redeliveries.
	cfg.Pipeline.BatchSize = 3
	cfg.Pipeline.BatchTimeout = time.Minute
	cfg.Pipeline.Linger = time.Minute
	w := &cutWriter{inner: ingestcore.PGWriter{Pool: b.db.Pool}, proxy: proxy}
	s, err := newAMQP(cfg, w, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	msgs := []amqp.Publishing{
		amqpEvent("ok-1", "t", "ok"),
		{Type: "t", Body: []byte("no id"), Headers: amqp.Table{"note": "malformed"}},
		{MessageId: "poison", Type: "t", Body: []byte("wide"), Headers: wideHeaders(8193)},
	}
	b.publishTo(t, q, msgs...)
	startAMQP(t, s)
	waitFor(t, 30*time.Second, func() (bool, string) {
		// Every delivery written: inserted or found there already.
		written := testutil.ToFloat64(s.Metrics.RowsInserted) + testutil.ToFloat64(s.Metrics.Duplicates)
		return written >= 2*float64(len(msgs)) && testutil.ToFloat64(s.Metrics.Reconnects) >= 1 && s.Ready() && b.messagesIn(t, q) == 0,
			fmt.Sprintf("%v deliveries written (want %d), %v reconnects, ready %v, %d left in the queue",
				written, 2*len(msgs), testutil.ToFloat64(s.Metrics.Reconnects), s.Ready(), b.messagesIn(t, q))
	})
	if got := testutil.ToFloat64(s.Metrics.Duplicates); got != float64(len(msgs)) {
		t.Errorf("duplicates = %v, want the whole redelivered batch (%d)", got, len(msgs))
	}
	rows := readRows(t, b.db)
	var rejected []string
	for _, r := range rows {
		if r.Status == ingestcore.StatusRejected {
			rejected = append(rejected, fmt.Sprintf("%s (x-delivery-count %v)", r.EventID, r.Headers["x-delivery-count"]))
		}
	}
	if len(rows) != 3 || len(rejected) != 2 {
		t.Errorf("%d rows, %d rejected %v: want 3 rows, 2 rejected (one per malformed message)", len(rows), len(rejected), rejected)
	}
}

// deepArrays is a headers table whose entry "a" nests arrays levels deep.
func deepArrays(levels int) amqp.Table {
	var inner any = "leaf"
	for range levels {
		inner = []any{inner}
	}
	return amqp.Table{"a": inner}
}

// amqpFramesRefuse reports whether a bare amqp091-go consumer loses its
// connection on the message waiting in queue (refused), and whether a
// connection through amqpFrames notes it unreadable (noted) and still
// delivers it.
func amqpFramesRefuse(t *testing.T, queue string) (refused, noted bool) {
	t.Helper()
	consume := func(conn *amqp.Connection) (<-chan amqp.Delivery, chan *amqp.Error) {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		ds, err := ch.Consume(queue, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ds, closed
	}
	bare, err := amqp.Dial(testkit.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	ds, closed := consume(bare)
	select {
	case _, ok := <-ds:
		refused = !ok // the deliveries end when the connection closes
	case <-closed:
		refused = true
	case <-time.After(20 * time.Second):
		t.Fatal("the bare client neither got the message nor lost its connection")
	}
	_ = bare.Close() // the message goes back to the queue

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, frames, err := dialAMQP(ctx, testkit.AMQPURL(), ingest.TLSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ds, closed = consume(conn)
	select {
	case d, ok := <-ds:
		if !ok {
			t.Fatalf("the connection through amqpFrames was lost: %v", <-closed)
		}
		_, noted = frames.take(d.ConsumerTag, d.DeliveryTag)
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	case err := <-closed:
		t.Fatalf("the connection through amqpFrames was lost: %v", err)
	case <-ctx.Done():
		t.Fatal("no delivery through amqpFrames")
	}
	return refused, noted
}

// amqpFrames notes a headers table unreadable exactly when amqp091-go
// itself refuses it, on each side of each limit, and the client reads
// what amqpFrames passes on.
func TestAMQPHeaderChecksMatchTheClient(t *testing.T) {
	t.Parallel()
	b := setupAMQP(t)
	cases := []struct {
		name    string
		headers amqp.Table
		refused bool
	}{
		{"8192 entries", wideHeaders(8192), false},
		{"8193 entries", wideHeaders(8193), true},
		{"tables 32 deep", deepHeaders(32), false},
		{"tables 33 deep", deepHeaders(33), true},
		{"arrays 32 deep", deepArrays(32), false},
		{"arrays 33 deep", deepArrays(33), true},
		{"array of 8192", amqp.Table{"a": make([]any, 8192)}, false},
		{"array of 8193", amqp.Table{"a": make([]any, 8193)}, true},
		{"nested table of 8193", amqp.Table{"n": wideHeaders(8193)}, true},
		{"every type", amqp.Table{"t": true, "b": int8(-1), "B": byte(1), "s": int16(-2), "u": uint16(2), "I": int32(-3),
			"i": uint32(3), "l": int64(-4), "f": float32(1.5), "d": 2.5, "D": amqp.Decimal{Scale: 2, Value: 314}, "S": "str",
			"T": time.Unix(1700000000, 0), "x": []byte{0, 1}, "V": nil, "A": []any{"a", int32(1), amqp.Table{"k": "v"}},
			"F": amqp.Table{"k": []any{}}}, false},
	}
	for i, c := range cases {
		q := b.declare(t, fmt.Sprint(i), nil)
		b.publishTo(t, q, amqp.Publishing{MessageId: "m", Type: "t", Body: []byte("x"), Headers: c.headers})
		refused, noted := amqpFramesRefuse(t, q)
		if refused != c.refused {
			t.Errorf("%s: amqp091-go refused %v, want %v: the limits moved", c.name, refused, c.refused)
		}
		if noted != refused {
			t.Errorf("%s: amqpFrames noted it unreadable %v, amqp091-go refused it %v", c.name, noted, refused)
		}
	}
}
