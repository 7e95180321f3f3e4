package faultsuite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/internal/testkit"
)

// RabbitMQ is a scenario's durable queue on the real RabbitMQ server (a
// name with a random suffix, deleted when the test ends) and a publishing
// channel in confirm mode. It implements Broker.
type RabbitMQ struct {
	t     testing.TB
	url   *url.URL
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string
}

// NewRabbitMQ declares the queue. A server that cannot be reached skips
// the test, or fails it under CI=true (testkit.Unavailable).
func NewRabbitMQ(t testing.TB) *RabbitMQ {
	t.Helper()
	u, err := url.Parse(testkit.AMQPURL())
	if err != nil {
		t.Fatalf("INBOXD_TEST_AMQP_URL: %v", err)
	}
	conn, err := amqp.Dial(u.String())
	if err != nil {
		testkit.Unavailable(t, fmt.Sprintf("RabbitMQ at %s unavailable (start it with rabbitmq-server -detached): %v", u.Host, err))
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	r := &RabbitMQ{t: t, url: u, conn: conn, ch: ch, queue: "inboxd-fault-" + hex.EncodeToString(suffix[:])}
	if _, err := ch.QueueDeclare(r.queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ch.QueueDelete(r.queue, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", r.queue, err)
		}
	})
	return r
}

// Kind is "amqp".
func (r *RabbitMQ) Kind() string { return "amqp" }

// Source is the queue's name.
func (r *RabbitMQ) Source() string { return r.queue }

// Upstream is the server's host:port.
func (r *RabbitMQ) Upstream() string { return r.url.Host }

// DaemonEnv consumes the queue through addr.
func (r *RabbitMQ) DaemonEnv(addr string) []string {
	u := *r.url
	u.Host = addr
	return []string{"INBOXD_AMQP_URL=" + u.String(), "INBOXD_AMQP_QUEUES=" + r.queue}
}

// Publish sends msgs (persistent, to the queue through the default
// exchange) and waits for every confirmation.
func (r *RabbitMQ) Publish(ctx context.Context, msgs []BrokerMessage) ([]bool, error) {
	ok := make([]bool, len(msgs))
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	confirms := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		p := amqp.Publishing{MessageId: m.ID, Type: m.Type, Body: m.Body, DeliveryMode: amqp.Persistent}
		dc, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, "", r.queue, true, false, p)
		if err != nil {
			return ok, fmt.Errorf("publish to %s: %w", r.queue, err)
		}
		confirms = append(confirms, dc)
	}
	for i, dc := range confirms {
		acked, err := dc.WaitContext(ctx)
		if err != nil {
			return ok, fmt.Errorf("confirm from %s: %w", r.queue, err)
		}
		ok[i] = acked
	}
	return ok, nil
}

// Pending reports the messages waiting in the queue. RabbitMQ's count
// leaves out deliveries a consumer holds unacknowledged: call it once the
// daemons have stopped (their unacknowledged deliveries are back in the
// queue then) to check that nothing is left unacknowledged.
func (r *RabbitMQ) Pending() (bool, string) {
	q, err := r.ch.QueueDeclarePassive(r.queue, true, false, false, false, nil)
	if err != nil {
		return false, err.Error()
	}
	return q.Messages == 0, fmt.Sprintf("queue %s: %d messages, %d consumers", r.queue, q.Messages, q.Consumers)
}
