package publishers

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// The tests of a key's order when one of its rows fails after it was sent,
// on the real brokers: the rows after it are not published before it.

// keyHeldWhilePending fails t if, in one snapshot of the table, first is
// pending while a row of later is published.
func keyHeldWhilePending(t *testing.T, db *pgtest.DB, first string, later ...string) (firstStatus string) {
	t.Helper()
	var published int
	if err := db.Pool.QueryRow(context.Background(), `
		SELECT (SELECT status FROM outbox WHERE event_id = $1),
		       (SELECT count(*) FROM outbox WHERE event_id = ANY ($2) AND status = 'published')`,
		first, later).Scan(&firstStatus, &published); err != nil {
		t.Fatal(err)
	}
	if firstStatus == "pending" && published > 0 {
		t.Fatalf("%d of %v published while %s, before them in their key, is still pending", published, later, first)
	}
	return firstStatus
}

// The reproduction: a row whose PubAck fails (JetStream error
// 10060: its Nats-Expected-Stream header names another stream) and the
// two rows after it of the same key, in one batch. The two are not
// published while it is pending; it is refused (attempts counted) and goes
// dead, and then they are published, in their order.
func TestNATSFailedPubAckHoldsItsKey(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	nb := setupNATSPub(t)
	dest := "nats:" + nb.stream + ".orders"
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO outbox (destination, event_id, event_type, key, headers) VALUES
		  ($1, 'k0', 't', 'k', '{"Nats-Expected-Stream": "another-stream"}'),
		  ($1, 'k1', 't', 'k', '{}'),
		  ($1, 'k2', 't', 'k', '{}'),
		  ($1, 'o0', 't', 'o', '{}')`, dest); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.MaxAttempts = 2
	runTunedRelay(t, db, cfg, map[string]outbox.Publisher{outbox.KindNATS: newNATSPub(t, testkit.NATSURL())}, pubLogger(t), func(r *outbox.Relay) {
		_, hold := r.Backoffs()
		r.SetBackoffs(backoff.Exponential{Base: 100 * time.Millisecond, Max: 100 * time.Millisecond}, hold)
	})
	testkit.WaitFor(t, 20*time.Second, "k0 dead", func() bool { return keyHeldWhilePending(t, db, "k0", "k1", "k2") == "dead" })
	testkit.WaitFor(t, 20*time.Second, "k1, k2 and o0 published", func() bool { return count(t, db, "status = 'published'") == 3 })
	_, attempts, lastErr := rowState(t, db, "k0")
	if attempts != 2 || lastErr == "" {
		t.Errorf("k0: %d attempts, last_error %q; want 2 and the server's reason", attempts, lastErr)
	}
	got := nb.consume(t, 3)
	var order []string
	for _, g := range got {
		if g.key == "k" {
			order = append(order, g.headers[outbox.EventIDHeader])
		}
	}
	if len(order) != 2 || order[0] != "k1" || order[1] != "k2" {
		t.Errorf("key k in the stream: %v, want [k1 k2]", order)
	}
}

// On RabbitMQ: a queue that refuses what would take it over its
// x-max-length-bytes (overflow reject-publish) nacks the first row of a
// key, a 200-byte message, and would take the 10-byte row after it. That
// row is not published while the first is pending (a nack is a state of
// the destination, retried); a row of another key is.
func TestAMQPNackedRowHoldsItsKey(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ab := setupAMQPPub(t)
	queue := randomName("outbox-test-small-")
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
	r := runTunedRelay(t, db, testConfig(), map[string]outbox.Publisher{outbox.KindAMQP: newAMQPPub(t, AMQPConfig{})}, pubLogger(t), func(r *outbox.Relay) {
		retry, _ := r.Backoffs()
		r.SetBackoffs(retry, backoff.Exponential{Base: 20 * time.Millisecond, Max: 20 * time.Millisecond})
	})
	nacks := r.FailedCount(dest, "unavailable")
	testkit.WaitFor(t, 20*time.Second, "k0 nacked three times and o0 published", func() bool {
		keyHeldWhilePending(t, db, "k0", "k1")
		st, _, _ := rowState(t, db, "o0")
		return testutil.ToFloat64(nacks) >= 3 && st == "published"
	})
	keyHeldWhilePending(t, db, "k0", "k1")
	if st, _, _ := rowState(t, db, "k1"); st != "pending" {
		t.Errorf("k1 is %s, want pending behind k0", st)
	}
}

// Kafka's idempotent producer keeps a key's order through a failure after
// sending: when the broker refuses the batch of a key's first record, the
// records after it in its partition, each in a batch of its own, already
// sent or not, fail too, and the topic holds none of them. This is what
// lets the relay hand a key's Kafka rows over together (PipelinesKeys).
func TestKafkaFailedRecordFailsTheRestOfItsKey(t *testing.T) {
	t.Parallel()
	cluster := seededCluster(t)
	// The first produce request is refused, every partition of it.
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range pr.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.InvalidRecord.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	p := kafkaPub(t, KafkaConfig{Brokers: cluster.ListenAddrs(), MaxMessageBytes: 700})
	if !p.PipelinesKeys() {
		t.Fatal("the Kafka publisher does not pipeline a key's messages")
	}
	dest := outbox.Destination{Kind: outbox.KindKafka, Name: "t"}
	var msgs []outbox.Message
	for _, id := range []string{"k0", "k1", "k2"} {
		msgs = append(msgs, testMessage(dest, id, "t", "k", []byte(randomText(300))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := p.Publish(ctx, msgs)
	wantRefused(t, "the refused record", errs[0])
	for i := 1; i < 3; i++ {
		if errs[i] == nil {
			t.Errorf("%s, after the refused record of its key, was acknowledged", msgs[i].EventID)
		}
	}
	kb := &kafkaBundle{brokers: cluster.ListenAddrs()}
	publishAll(t, p, [][]outbox.Message{{testMessage(dest, "after", "t", "k", []byte("{}"))}})
	if got := kb.consume(t, "t", 1); got[0].headers[outbox.EventIDHeader] != "after" {
		t.Errorf("the topic's first record is %s, want the one published after the failure", got[0].headers[outbox.EventIDHeader])
	}
}
