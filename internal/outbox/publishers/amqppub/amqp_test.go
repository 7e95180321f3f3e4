package amqppub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/ingest"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/internal/brokers/amqpconn"
	"github.com/inboxd/inboxd/internal/ingestcore/amqpmap"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/pubtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// amqpBundle is one test's exchange on the real RabbitMQ, with a queue
// bound to it for routing key "rk", and a connection to read it.
type amqpBundle struct {
	exchange string
	queue    string
	ch       *amqp.Channel
}

func setupAMQPPub(t *testing.T) *amqpBundle {
	t.Helper()
	conn, err := amqp.Dial(testkit.AMQPURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s: %v", amqpconn.RedactURL(testkit.AMQPURL()), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	b := &amqpBundle{exchange: pubtest.RandomName("outbox-test-x-"), queue: pubtest.RandomName("outbox-test-q-"), ch: ch}
	if err := ch.ExchangeDeclare(b.exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(b.queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(b.queue, "rk", b.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ch.QueueDelete(b.queue, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", b.queue, err)
		}
		if err := ch.ExchangeDelete(b.exchange, false, false); err != nil {
			t.Errorf("delete exchange %s: %v", b.exchange, err)
		}
		_ = conn.Close()
	})
	return b
}

func newAMQPPub(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = testkit.AMQPURL()
	}
	p, err := New(cfg, pubtest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = p.Close() // idempotent
	})
	return p
}

func (b *amqpBundle) dest() outbox.Destination {
	return outbox.Destination{Kind: outbox.KindAMQP, Name: b.exchange, RoutingKey: "rk"}
}

// consume reads n messages from the queue, each mapped by inboxd's
// RabbitMQ ingest too, and checks their properties.
func (b *amqpBundle) consume(t *testing.T, n int) []pubtest.Received {
	t.Helper()
	var got []pubtest.Received
	testkit.WaitForReport(t, 30*time.Second, func() (bool, string) {
		for len(got) < n {
			d, ok, err := b.ch.Get(b.queue, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if d.DeliveryMode != amqp.Persistent {
				t.Errorf("%s: delivery mode %d, want persistent", d.MessageId, d.DeliveryMode)
			}
			if d.MessageId == "" || d.MessageId != d.Headers[outbox.EventIDHeader] || d.Type != d.Headers[outbox.EventTypeHeader] {
				t.Errorf("properties message_id %q, type %q; headers %v", d.MessageId, d.Type, d.Headers)
			}
			hs := map[string]string{}
			for k, v := range d.Headers {
				s, _ := v.(string)
				hs[k] = s
			}
			got = append(got, pubtest.Received{Key: hs[outbox.KeyHeader], Headers: hs, Payload: d.Body,
				Row: amqpmap.MapDelivery(b.queue, d, ingest.MapOptions{})})
		}
		return len(got) >= n, "messages read back from the queue"
	})
	return got
}

// 200 messages over four keys, in three Publish calls, are read back in
// order, persistent, with message_id and type set, the key and every
// header in the headers table; inboxd's own RabbitMQ ingest maps each to
// its event id, type and key.
func TestAMQPPublishKeepsOrderAndHeaders(t *testing.T) {
	t.Parallel()
	b := setupAMQPPub(t)
	p := newAMQPPub(t, Config{})
	if p.Ready() {
		t.Error("ready before the first Publish (it does not connect in outbox.New)")
	}
	batches := pubtest.OrderedBatches(b.dest(), 200, 4, 3)
	pubtest.PublishAll(t, p, batches)
	if !p.Ready() {
		t.Error("not ready after publishing")
	}
	pubtest.CheckReceived(t, batches, b.consume(t, 200))
}

// A message over MaxMessageBytes is refused by Check; a message no queue
// takes (mandatory, basic.return) is refused by Publish, and the one
// after it in the same call is published.
func TestAMQPRefusesTooLargeAndUnroutable(t *testing.T) {
	t.Parallel()
	b := setupAMQPPub(t)
	p := newAMQPPub(t, Config{MaxMessageBytes: 1024})
	pubtest.WantRefused(t, "Check of a message over MaxMessageBytes", p.Check(pubtest.Message(b.dest(), "big", "t", "k", make([]byte, 1025))))
	if err := p.Check(pubtest.Message(b.dest(), "ok", "t", "k", make([]byte, 1024))); err != nil {
		t.Errorf("Check of a message at MaxMessageBytes: %v", err)
	}

	unroutable := pubtest.Message(outbox.Destination{Kind: outbox.KindAMQP, Name: b.exchange, RoutingKey: "nobody"}, "lost", "t", "k", []byte("{}"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := p.Publish(ctx, []outbox.Message{unroutable, pubtest.Message(b.dest(), "routed", "t", "k", []byte("{}"))})
	pubtest.WantRefused(t, "an unroutable message", errs[0])
	if errs[1] != nil {
		t.Errorf("the routable message after it: %v", errs[1])
	}
	// The default exchange and a queue that does not exist: unroutable too.
	_, err := pubtest.PublishOne(p, pubtest.Message(outbox.Destination{Kind: outbox.KindAMQP, Name: "", RoutingKey: pubtest.RandomName("no-queue-")}, "lost2", "t", "", []byte("{}")), 20*time.Second)
	pubtest.WantRefused(t, "a message to the default exchange for a missing queue", err)
	if got := b.consume(t, 1); got[0].Headers[outbox.EventIDHeader] != "routed" {
		t.Errorf("read back %v", got[0].Headers)
	}
}

// A missing exchange (the server closes the channel, 404) is not a
// refusal, and comes back within the deadline; the same publisher then
// publishes to an exchange that exists, on a new channel.
func TestAMQPMissingExchangeIsNotRefused(t *testing.T) {
	t.Parallel()
	b := setupAMQPPub(t)
	p := newAMQPPub(t, Config{})
	const deadline = 10 * time.Second
	missing := outbox.Destination{Kind: outbox.KindAMQP, Name: pubtest.RandomName("missing-"), RoutingKey: "rk"}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, []outbox.Message{pubtest.Message(missing, "m1", "t", "k", []byte("{}")), pubtest.Message(missing, "m2", "t", "k", []byte("{}"))})
	for i, err := range errs {
		pubtest.WantTransient(t, "a missing exchange", err, time.Since(start), deadline)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("message %d: the deadline passed (%v): want the channel's close", i, err)
		}
	}
	if !strings.Contains(errs[0].Error(), "does not exist") {
		t.Errorf("a missing exchange: %v, want it said", errs[0])
	}
	if _, err := pubtest.PublishOne(p, pubtest.Message(b.dest(), "after", "t", "k", []byte("{}")), deadline); err != nil {
		t.Errorf("an existing exchange after the missing one: %v", err)
	}
	if got := b.consume(t, 1); got[0].Headers[outbox.EventIDHeader] != "after" {
		t.Errorf("read back %v", got[0].Headers)
	}
}

// With the connection cut (through a proxy), Publish fails within its
// deadline, not refused, and is not ready; once the network heals a
// Publish connects again and succeeds.
func TestAMQPConnectionCut(t *testing.T) {
	t.Parallel()
	b := setupAMQPPub(t)
	proxy, url := testkit.ProxyTo(t, testkit.AMQPURL())
	p := newAMQPPub(t, Config{URL: url})
	pubtest.ConnectionCut(t, proxy, p, b.dest(), b.consume)
}

// Publish returns within its ctx when the network drops everything (a
// black hole: no close, no answer), the message failing with the ctx's
// error, not refused; the next Publish after the network heals succeeds.
func TestAMQPBlackHoleReturnsWithinCtx(t *testing.T) {
	t.Parallel()
	b := setupAMQPPub(t)
	proxy, url := testkit.ProxyTo(t, testkit.AMQPURL())
	p := newAMQPPub(t, Config{URL: url})
	if _, err := pubtest.PublishOne(p, pubtest.Message(b.dest(), "before", "t", "k", []byte("{}")), 10*time.Second); err != nil {
		t.Fatalf("before the black hole: %v", err)
	}
	if err := proxy.BlackHole(); err != nil {
		t.Fatal(err)
	}
	const deadline = 2 * time.Second
	for range 2 { // on the open channel, then on a new connection
		took, err := pubtest.PublishOne(p, pubtest.Message(b.dest(), "during", "t", "k", []byte("{}")), deadline)
		pubtest.WantTransient(t, "publishing into a black hole", err, took, deadline)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitForReport(t, 30*time.Second, func() (bool, string) {
		_, err := pubtest.PublishOne(p, pubtest.Message(b.dest(), "after", "t", "k", []byte("{}")), deadline)
		return err == nil, "a Publish succeeds after the network heals (last: " + pubtest.ErrString(err) + ")"
	})
}

// What amqp091-go cannot encode, or RabbitMQ closes the channel for, is
// refused by Check as unencodable, with the reason; Publish, given one
// anyway, refuses it without sending it, and the message after it in the
// same call is confirmed on the same connection.
func TestAMQPRefusesWhatItCannotEncode(t *testing.T) {
	t.Parallel()
	b := setupAMQPPub(t)
	p := newAMQPPub(t, Config{})
	many := pubtest.Message(b.dest(), "many", "t", "k", nil)
	for i := range outbox.AMQPMaxTableEntries + 1 {
		many.Headers = append(many.Headers, outbox.Header{Key: fmt.Sprintf("h%05d", i), Value: "v"})
	}
	big := pubtest.Message(b.dest(), "big-headers", "t", "k", nil)
	big.Headers = append(big.Headers, outbox.Header{Key: "blob", Value: strings.Repeat("x", outbox.DefaultAMQPFrameSize)})
	withHeader := func(id, k, v string) outbox.Message {
		m := pubtest.Message(b.dest(), id, "t", "k", []byte("{}"))
		m.Headers = append(m.Headers, outbox.Header{Key: k, Value: v})
		return m
	}
	for _, c := range []struct {
		m    outbox.Message
		want string
	}{
		{pubtest.Message(b.dest(), strings.Repeat("x", 256), "t", "k", nil), "message_id"},
		{pubtest.Message(b.dest(), "long-type", strings.Repeat("t", 256), "k", nil), "type"},
		{withHeader("long-name", strings.Repeat("n", 256), "v"), "header name"},
		{withHeader("cc", "CC", "other-queue"), "header CC"},
		{withHeader("expiration", amqpmap.AMQPExpirationHeader, "soon"), "header expiration"},
		{withHeader("timestamp", amqpmap.AMQPTimestampHeader, "yesterday"), "header timestamp"},
		{withHeader("content-type", amqpmap.AMQPContentTypeHeader, strings.Repeat("c", 256)), "header content-type"},
		{many, "over the 8192"},
		{big, "frame size"},
	} {
		err := p.Check(c.m)
		if !errors.Is(err, outbox.ErrUnencodable) || !errors.Is(err, outbox.ErrRefused) || !strings.Contains(pubtest.ErrString(err), c.want) {
			t.Errorf("Check of %.20s: %v, want unencodable, saying %q", c.m.EventID, err, c.want)
		}
	}
	pubtest.WantUnencodableThenNext(t, p, withHeader("cc", "CC", "other-queue"), pubtest.Message(b.dest(), "after", "t", "k", []byte("{}")))
	if got := b.consume(t, 1); got[0].Headers[outbox.EventIDHeader] != "after" {
		t.Errorf("read back %v", got[0].Headers)
	}

	// A 406 RabbitMQ closes the channel with is a refusal of the message
	// it names, not of another.
	m := pubtest.Message(b.dest(), "m", "t", "k", make([]byte, 10))
	m.Headers = append(m.Headers, outbox.Header{Key: "X-Odd", Value: "v"})
	for _, c := range []struct {
		reason  string
		culprit bool
		refused bool
	}{
		{`PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"X-Odd",longstr}`, true, true},
		{`PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",longstr}`, true, false},
		{`PRECONDITION_FAILED - message size 10 is larger than configured max size 5`, true, true},
		{`PRECONDITION_FAILED - message size 11 is larger than configured max size 5`, true, false},
		{`PRECONDITION_FAILED - user_id property set to 'x' but authenticated user was 'guest'`, true, true},
		{`PRECONDITION_FAILED - user_id property set to 'x' but authenticated user was 'guest'`, false, false},
	} {
		err := p.closedError(m, &amqp.Error{Code: amqp.PreconditionFailed, Reason: c.reason}, c.culprit)
		if errors.Is(err, outbox.ErrRefused) != c.refused {
			t.Errorf("closed with %q (culprit %v): %v, refused %v", c.reason, c.culprit, err, c.refused)
		}
	}
}
