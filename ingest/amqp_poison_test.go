package ingest

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/netfault"
	"github.com/inboxd/inboxd/internal/testkit"
)

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
	s, err := newAMQP(cfg, pgWriter{pool: b.db.Pool}, testLoggerTo(t, &logs), prometheus.NewRegistry())
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
			if rows[q+" "+id].Status == StatusReceived {
				stored++
			}
		}
		rejected := 0
		for _, r := range rows {
			if r.Status == StatusRejected {
				rejected++
			}
		}
		return stored == len(healthy) && rejected == 2,
			fmt.Sprintf("healthy messages: %d of %d stored; %d rejected rows, want 2; %v reconnects",
				stored, len(healthy), rejected, testutil.ToFloat64(s.metrics.Reconnects))
	})
	t.Logf("the %d healthy messages and the 2 rejected rows stored %v after the start", len(healthy), time.Since(start).Round(time.Millisecond))
	if !s.Ready() {
		t.Error("not ready although every queue is consumed")
	}
	if n := testutil.ToFloat64(s.metrics.Reconnects); n != 0 {
		t.Errorf("%v reconnects: the unreadable message cost a connection", n)
	}
	if n := testutil.ToFloat64(s.metrics.Rejected.WithLabelValues(string(RejectOversize))); n != 2 {
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
		if r.Status != StatusRejected {
			continue
		}
		if r.Source != b.queue || !strings.HasPrefix(r.EventID, b.queue+"/sha256/") {
			t.Errorf("rejected row %s %s: want the poisoned queue and an id derived from the message", r.Source, r.EventID)
		}
		if w := want[string(r.Payload)]; r.LastError == nil || !strings.Contains(*r.LastError, w) {
			t.Errorf("rejected row %q: last_error %v, want it to say %q", r.Payload, deref(r.LastError), w)
		}
		if _, ok := r.Headers[AMQPMessageIDHeader]; !ok || r.Headers["h1"] != nil || r.Headers["n"] != nil {
			t.Errorf("rejected row %q: headers %v, want the properties and none of the unreadable table", r.Payload, r.Headers)
		}
		if Unstored(deref(r.LastError)) == nil {
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
	s, err := newAMQP(cfg, pgWriter{pool: b.db.Pool}, testLogger(t), prometheus.NewRegistry())
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
		return ok && s.Ready() && testutil.ToFloat64(s.metrics.Reconnects) >= 1,
			fmt.Sprintf("stored %v, ready %v, reconnects %v", ok, s.Ready(), testutil.ToFloat64(s.metrics.Reconnects))
	})
}

// cutWriter writes through to the database, then, the first time a batch
// holds a rejected row, cuts every connection through the proxy before
// the batch can be acknowledged: the broker delivers it again.
type cutWriter struct {
	inner inboxWriter
	proxy *netfault.Proxy
	cut   atomic.Bool
}

func (w *cutWriter) WriteBatch(ctx context.Context, rows []Row) (int, error) {
	n, err := w.inner.WriteBatch(ctx, rows)
	if err != nil {
		return n, err
	}
	for _, r := range rows {
		if r.Status == StatusRejected && w.cut.CompareAndSwap(false, true) {
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
	u, err := url.Parse(testkit.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	cfg := b.config()
	cfg.Queues = []string{q}
	if cfg.URL, err = proxy.Rewrite(cfg.URL); err != nil {
		t.Fatal(err)
	}
	// A batch closes at 3 rows, never on time: the first holds the three
	// messages, the second their three redeliveries.
	cfg.Pipeline.BatchSize = 3
	cfg.Pipeline.BatchTimeout = time.Minute
	cfg.Pipeline.Linger = time.Minute
	w := &cutWriter{inner: pgWriter{pool: b.db.Pool}, proxy: proxy}
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
		written := testutil.ToFloat64(s.metrics.RowsInserted) + testutil.ToFloat64(s.metrics.Duplicates)
		return written >= 2*float64(len(msgs)) && testutil.ToFloat64(s.metrics.Reconnects) >= 1 && s.Ready() && b.messagesIn(t, q) == 0,
			fmt.Sprintf("%v deliveries written (want %d), %v reconnects, ready %v, %d left in the queue",
				written, 2*len(msgs), testutil.ToFloat64(s.metrics.Reconnects), s.Ready(), b.messagesIn(t, q))
	})
	if got := testutil.ToFloat64(s.metrics.Duplicates); got != float64(len(msgs)) {
		t.Errorf("duplicates = %v, want the whole redelivered batch (%d)", got, len(msgs))
	}
	rows := readRows(t, b.db)
	var rejected []string
	for _, r := range rows {
		if r.Status == StatusRejected {
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
	conn, frames, err := dialAMQP(ctx, testkit.AMQPURL(), TLSConfig{}, true)
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
