package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// RabbitMQ → inbox → HTTP sink through the real binary: INBOXD_AMQP_URL and
// INBOXD_AMQP_QUEUES run the RabbitMQ source; every unique event is
// delivered once and ends processed, a duplicate is absorbed, a message
// without an id is one rejected row, and the queue ends empty.
func TestRabbitMQToSinkEndToEnd(t *testing.T) {
	t.Parallel()
	url, ch, queue := rabbitQueue(t)

	db := pgtest.New(t)
	s := newSink(t)
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: http\n    url: "+s.URL+"\n")
	startDaemon(t,
		"INBOXD_DATABASE_URL="+db.URL,
		"INBOXD_AMQP_URL="+url,
		"INBOXD_AMQP_QUEUES="+queue,
		"INBOXD_ROUTES="+routes,
		"INBOXD_LEASE=2s",
		"INBOXD_BACKOFF_BASE=50ms",
		"INBOXD_BACKOFF_MAX=200ms",
	)

	publish := func(p amqp.Publishing) {
		t.Helper()
		if err := publishConfirmed(ch, queue, p); err != nil {
			t.Fatal(err)
		}
	}
	const n = 100
	for i := range n {
		publish(amqp.Publishing{MessageId: fmt.Sprintf("o-%03d", i), Type: "order.created", Body: []byte(`{}`)})
	}
	publish(amqp.Publishing{MessageId: "o-007", Type: "order.created", Body: []byte(`{}`)})
	publish(amqp.Publishing{Type: "order.created", Body: []byte("no id")})
	publish(amqp.Publishing{MessageId: "late-1", Body: []byte(`{}`), Headers: amqp.Table{"kind": "order.created"}})

	waitFor(t, 30*time.Second, "all events processed", func() bool { return countStatus(t, db, "processed") == n })
	waitFor(t, 10*time.Second, "two rejected rows", func() bool { return countStatus(t, db, "rejected") == 2 })

	// Once the type header is configured, requeue maps the row without a
	// type again by RabbitMQ's rules: its message_id property is its id.
	if code, out := inboxd(t, []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_EVENT_TYPE_HEADERS=event_type,kind"},
		"requeue", "--status", "rejected", "--all"); code != 0 || !strings.Contains(out, "requeued 1") {
		t.Fatalf("requeue: exit %d\n%s", code, out)
	}
	waitFor(t, 30*time.Second, "the requeued event processed", func() bool { return len(s.ByKey(queue+"/late-1")) == 1 })
	if got := countStatus(t, db, "rejected"); got != 1 {
		t.Errorf("rejected rows = %d, want 1 (the message without an id)", got)
	}
	for i := range n {
		key := fmt.Sprintf("%s/o-%03d", queue, i)
		if got := s.ByKey(key); len(got) != 1 || got[0].Source != queue {
			t.Fatalf("%s delivered %d times: %+v", key, len(got), got)
		}
	}
	waitFor(t, 10*time.Second, "queue empty", func() bool {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err == nil && q.Messages == 0 && q.Consumers == 1
	})
}

// rabbitQueue declares a queue of the test's own on the local RabbitMQ
// (INBOXD_TEST_AMQP_URL overrides it), deleted when the test ends, and
// returns the URL and a channel in confirm mode.
func rabbitQueue(t *testing.T) (url string, ch *amqp.Channel, queue string) {
	t.Helper()
	url = testkit.AMQPURL()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("connect to RabbitMQ (start it with rabbitmq-server -detached): %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if ch, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	queue = "inboxd-it-" + hex.EncodeToString(suffix[:])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return url, ch, queue
}

// publishConfirmed publishes p to queue and waits for the broker's
// confirmation.
func publishConfirmed(ch *amqp.Channel, queue string, p amqp.Publishing) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.DeliveryMode = amqp.Persistent
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("publish not confirmed: %v", err)
	}
	return nil
}

// Three SIGKILLs of the daemon while a stream with 10 % duplicates and
// malformed messages flows lose nothing: every unique event is in the
// inbox once and processed, every malformed message is one rejected row,
// and once the daemon stops nothing is left in the queue (every delivery
// was acknowledged, after its row was stored).
func TestRabbitMQSIGKILLsMidStreamLoseNothing(t *testing.T) {
	t.Parallel()
	url, ch, queue := rabbitQueue(t)
	db := pgtest.New(t)
	s := newSink(t)
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: http\n    url: "+s.URL+"\n")
	env := []string{
		"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_AMQP_URL=" + url, "INBOXD_AMQP_QUEUES=" + queue,
		"INBOXD_ROUTES=" + routes, "INBOXD_LEASE=2s", "INBOXD_BACKOFF_BASE=50ms", "INBOXD_BACKOFF_MAX=200ms",
	}
	d := startDaemon(t, env...)

	const n, malformed = 3000, 30
	var published atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range n {
			id := fmt.Sprintf("k-%05d", i)
			msgs := []amqp.Publishing{{MessageId: id, Type: "order.created", Body: []byte(`{}`)}}
			if i%10 == 0 {
				msgs = append(msgs, amqp.Publishing{MessageId: id, Type: "order.created", Body: []byte(`{"dup":true}`)})
			}
			if i%(n/malformed) == 0 {
				msgs = append(msgs, amqp.Publishing{Type: "order.created", Body: []byte("no id " + id)})
			}
			for _, m := range msgs {
				if err := publishConfirmed(ch, queue, m); err != nil {
					done <- err
					return
				}
			}
			published.Add(1)
		}
		done <- nil
	}()

	for k := 1; k <= 3; k++ {
		waitFor(t, 60*time.Second, "stream under way", func() bool {
			return published.Load() >= int64(k*n/5) && countStatus(t, db, "received")+countStatus(t, db, "processed") > 0
		})
		d.Kill()
		if published.Load() == n {
			t.Fatalf("the stream had ended before kill %d: not a mid-stream kill", k)
		}
		d = startDaemon(t, env...)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "every event processed", func() bool { return countStatus(t, db, "processed") == n })
	if got := countStatus(t, db, "rejected"); got != malformed {
		t.Errorf("rejected rows = %d, want %d (one per malformed message)", got, malformed)
	}
	var rows int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n+malformed {
		t.Errorf("inbox has %d rows, want %d", rows, n+malformed)
	}
	for i := range n {
		if len(s.ByKey(fmt.Sprintf("%s/k-%05d", queue, i))) == 0 {
			t.Fatalf("k-%05d never delivered", i)
		}
	}
	if code := terminate(t, d, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Errorf("%d messages left in the queue after the daemon stopped: not every delivery was acknowledged", q.Messages)
	}
}
