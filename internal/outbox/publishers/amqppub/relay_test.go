package amqppub

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/pubtest"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/internal/testkit"
)

// The tests through the relay, on the real brokers: a key's order when one
// of its rows fails after it was sent (the rows after it are not published
// before it), and a row its broker's client cannot encode.

// On RabbitMQ: a queue that refuses what would take it over its
// x-max-length-bytes (overflow reject-publish) nacks the first row of a
// key, a 200-byte message, and would take the 10-byte row after it. That
// row is not published while the first is pending (a nack is a state of
// the destination, retried); a row of another key is.
func TestAMQPNackedRowHoldsItsKey(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ab := setupAMQPPub(t)
	queue := pubtest.RandomName("outbox-test-small-")
	if _, err := ab.ch.QueueDeclare(queue, false, false, false, false,
		amqp.Table{"x-max-length-bytes": int64(100), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ab.ch.QueueDelete(queue, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", queue, err)
		}
	})
	dest := "amqp:/" + queue
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO outbox (destination, event_id, event_type, key, payload) VALUES
		  ($1, 'k0', 't', 'k', convert_to(repeat('x', 200), 'UTF8')),
		  ($1, 'k1', 't', 'k', 'x'),
		  ($1, 'o0', 't', 'o', 'x')`, dest); err != nil {
		t.Fatal(err)
	}
	r := pubtest.RunTunedRelay(t, db, pubtest.RelayConfig(), map[string]outbox.Publisher{outbox.KindAMQP: newAMQPPub(t, Config{})}, pubtest.Logger(t), func(r *outbox.Relay) {
		retry, _ := r.Backoffs()
		r.SetBackoffs(retry, backoff.Exponential{Base: 20 * time.Millisecond, Max: 20 * time.Millisecond})
	})
	nacks := r.FailedCount(dest, "unavailable")
	testkit.WaitFor(t, 20*time.Second, "k0 nacked three times and o0 published", func() bool {
		pubtest.KeyHeldWhilePending(t, db, "k0", "k1")
		st, _, _ := pubtest.RowState(t, db, "o0")
		return testutil.ToFloat64(nacks) >= 3 && st == "published"
	})
	pubtest.KeyHeldWhilePending(t, db, "k0", "k1")
	if st, _, _ := pubtest.RowState(t, db, "k1"); st != "pending" {
		t.Errorf("k1 is %s, want pending behind k0", st)
	}
}

// The reproduction: a third party's SQL writes a row whose message
// amqp091-go cannot encode (a message_id over the 255 bytes of a
// shortstr). It is a refusal of that row: its attempt is counted and it
// goes dead with the reason, its key moves on, and every other row of its
// destination is published; the RabbitMQ connection is dialled once, never
// again for the poison row.
func TestUnencodableRowIsRefusedNotAnOutage(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ab := setupAMQPPub(t)
	var logs syncbuf.Buffer
	log := zerolog.New(&logs)
	ap, err := New(Config{URL: testkit.AMQPURL()}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ap.Close() })
	n := pubtest.PoisonRowIsRefused(t, db, "amqp:"+ab.exchange+"/rk", outbox.KindAMQP, ap, log,
		pubtest.Poison{EventID: strings.Repeat("x", 300), Headers: "{}", Reason: "255"})
	if got := ab.consume(t, n); len(got) != n {
		t.Errorf("RabbitMQ holds %d messages, want %d", len(got), n)
	}
	if n := strings.Count(logs.String(), "connected to RabbitMQ"); n != 1 {
		t.Errorf("RabbitMQ dialled %d times, want once", n)
	}
}
