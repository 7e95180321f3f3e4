package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/migrations/pgtest"
)

// RabbitMQ → inbox → HTTP sink through the real binary: INBOXD_AMQP_URL and
// INBOXD_AMQP_QUEUES run the RabbitMQ source; every unique event is
// delivered once and ends processed, a duplicate is absorbed, a message
// without an id is one rejected row, and the queue ends empty.
func TestRabbitMQToSinkEndToEnd(t *testing.T) {
	t.Parallel()
	url := os.Getenv("INBOXD_TEST_AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("connect to RabbitMQ (start it with rabbitmq-server -detached): %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	queue := "inboxd-it-" + hex.EncodeToString(suffix[:])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}

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

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish := func(p amqp.Publishing) {
		t.Helper()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
	const n = 100
	for i := range n {
		publish(amqp.Publishing{MessageId: fmt.Sprintf("o-%03d", i), Type: "order.created", Body: []byte(`{}`)})
	}
	publish(amqp.Publishing{MessageId: "o-007", Type: "order.created", Body: []byte(`{}`)})
	publish(amqp.Publishing{Type: "order.created", Body: []byte("no id")})

	waitFor(t, 30*time.Second, "all events processed", func() bool { return countStatus(t, db, "processed") == n })
	if got := countStatus(t, db, "rejected"); got != 1 {
		t.Errorf("rejected rows = %d, want 1", got)
	}
	for i := range n {
		key := fmt.Sprintf("%s/o-%03d", queue, i)
		if got := s.byKey(key); len(got) != 1 || got[0].Source != queue {
			t.Fatalf("%s delivered %d times: %+v", key, len(got), got)
		}
	}
	waitFor(t, 10*time.Second, "queue empty", func() bool {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err == nil && q.Messages == 0 && q.Consumers == 1
	})
}
