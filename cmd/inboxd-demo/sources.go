package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/brokers/amqpconn"
	"github.com/inboxd/inboxd/internal/natsurl"
)

// sources are the demo's --source values (send also takes webhook).
var sources = []string{"kafka", "rabbitmq", "nats"}

// event is one message the demo sends. malformed marks the one each source
// sends in a form its mapping rejects.
type event struct {
	id, typ, payload string
	malformed        bool
}

// events are the demo's messages, in the order they are sent: the orders
// (every tenth twice, as a producer retry would), the audits, an unknown
// event type, and the malformed one.
func events(p plan) []event {
	var evs []event
	for i := 1; i <= p.orders; i++ {
		e := event{id: fmt.Sprintf("order-%05d", i), typ: "order.created", payload: fmt.Sprintf(`{"order_id":%d,"amount":"%d.90"}`, i, i%100)}
		evs = append(evs, e)
		if i%10 == 0 {
			evs = append(evs, e)
		}
	}
	for i := 1; i <= p.audits; i++ {
		evs = append(evs, event{id: fmt.Sprintf("audit-%05d", i), typ: "order.audited", payload: `{}`})
	}
	evs = append(evs, event{id: "teleport-1", typ: "order.teleported", payload: `{"to":"mars"}`})
	return append(evs, event{typ: "order.created", malformed: true})
}

// chunk is how many events a source sends before waiting for the broker's
// acknowledgement of them all.
const chunk = 250

// source is the broker the demo's events go through.
type source interface {
	// name is the broker's name in the demo's output.
	name() string
	// malformed says, for the summary, what the malformed message lacks.
	malformed() string
	// env are the daemon's variables for this source.
	env() []string
	// publish sends evs, adding each acknowledged chunk to sent.
	publish(ctx context.Context, evs []event, sent *counter) error
	// close removes what the demo created on the broker.
	close() error
}

// openSource starts (kafka) or connects to (rabbitmq, nats) the broker of
// kind, creates the demo's topic, queue or stream on it and prints a line
// saying so.
func openSource(ctx context.Context, kind string, out io.Writer) (source, error) {
	switch kind {
	case "kafka":
		return openKafka(out)
	case "rabbitmq":
		return openRabbitMQ(envOr("INBOXD_DEMO_AMQP_URL", defaultAMQPURL), demoName("inboxd-demo-"), true, out)
	case "nats":
		return openNATS(ctx, envOr("INBOXD_DEMO_NATS_URL", defaultNATSURL), demoName("inboxd_demo_"), true, out)
	}
	return nil, fmt.Errorf("--source %q: use one of %s", kind, strings.Join(sources, ", "))
}

// The local servers' URLs, as the machine's RabbitMQ and NATS listen.
const (
	defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	defaultNATSURL = "nats://127.0.0.1:4222"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// demoName is prefix followed by eight random hex digits: the queue or
// stream of this demo run, beside any other on a shared server.
func demoName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// kafkaSource is an embedded Kafka-protocol broker (franz-go's kfake) with
// the topic in four partitions.
type kafkaSource struct {
	cluster *kfake.Cluster // nil when sending to brokers of someone else's
	brokers []string
	topic   string
}

func openKafka(out io.Writer) (*kafkaSource, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic))
	if err != nil {
		return nil, fmt.Errorf("start embedded Kafka: %w", err)
	}
	k := &kafkaSource{cluster: cluster, brokers: cluster.ListenAddrs(), topic: topic}
	fmt.Fprintf(out, "kafka      embedded broker (kfake) at %s, topic %q with 4 partitions\n", k.brokers[0], topic)
	return k, nil
}

func (k *kafkaSource) name() string      { return "Kafka" }
func (k *kafkaSource) malformed() string { return "without event id" }
func (k *kafkaSource) env() []string {
	return []string{"INBOXD_KAFKA_BROKERS=" + k.brokers[0], "INBOXD_KAFKA_TOPICS=" + k.topic, "INBOXD_KAFKA_GROUP=inboxd-demo"}
}
func (k *kafkaSource) close() error {
	if k.cluster != nil {
		k.cluster.Close()
	}
	return nil
}

// publish produces evs synchronously, in chunks: event_id and event_type
// headers, the event id as the key; the malformed one has no event_id.
func (k *kafkaSource) publish(ctx context.Context, evs []event, sent *counter) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.DefaultProduceTopic(k.topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, len(evs))
	for _, e := range evs {
		r := &kgo.Record{Key: []byte(e.id), Value: []byte(e.payload)}
		if e.malformed {
			r.Value = []byte(`{"oops":"no event id header"}`)
		} else {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "event_id", Value: []byte(e.id)})
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "event_type", Value: []byte(e.typ)})
		recs = append(recs, r)
	}
	for start := 0; start < len(recs); start += chunk {
		end := min(start+chunk, len(recs))
		if err := cl.ProduceSync(ctx, recs[start:end]...).FirstErr(); err != nil {
			return err
		}
		sent.add(end - start)
	}
	return nil
}

// rabbitSource is a queue on a RabbitMQ server: the demo's own, deleted at
// the end, or (send) one a real run consumes, declared if missing and kept.
type rabbitSource struct {
	url   string
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string
	own   bool
}

func openRabbitMQ(url, queue string, own bool, out io.Writer) (*rabbitSource, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ at %s (is it running? `rabbitmq-server -detached`; set INBOXD_DEMO_AMQP_URL): %w", amqpconn.RedactURL(url), err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	r := &rabbitSource{url: url, conn: conn, ch: ch, queue: queue, own: own}
	if _, err := ch.QueueDeclare(r.queue, true, false, false, false, nil); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("declare queue %s: %w", r.queue, err)
	}
	if own {
		fmt.Fprintf(out, "rabbitmq   server at %s, queue %q (deleted at the end)\n", amqpconn.RedactURL(url), r.queue)
	}
	return r, nil
}

func (r *rabbitSource) name() string      { return "RabbitMQ" }
func (r *rabbitSource) malformed() string { return "without message_id" }
func (r *rabbitSource) env() []string {
	return []string{"INBOXD_AMQP_URL=" + r.url, "INBOXD_AMQP_QUEUES=" + r.queue}
}

// publish publishes evs to the queue (default exchange), persistent, in
// chunks whose publisher confirms it waits for: the event id as message_id,
// the type as type, the event id as the key header; the malformed one has
// no message_id.
func (r *rabbitSource) publish(ctx context.Context, evs []event, sent *counter) error {
	for start := 0; start < len(evs); start += chunk {
		end := min(start+chunk, len(evs))
		confirms := make([]*amqp.DeferredConfirmation, 0, end-start)
		for _, e := range evs[start:end] {
			m := amqp.Publishing{MessageId: e.id, Type: e.typ, Headers: amqp.Table{"key": e.id}, Body: []byte(e.payload), DeliveryMode: amqp.Persistent}
			if e.malformed {
				m.MessageId, m.Headers, m.Body = "", nil, []byte(`{"oops":"no message_id"}`)
			}
			dc, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, "", r.queue, true, false, m)
			if err != nil {
				return err
			}
			confirms = append(confirms, dc)
		}
		for _, dc := range confirms {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("RabbitMQ nacked a message")
			}
		}
		sent.add(end - start)
	}
	return nil
}

// close deletes the queue, on a channel of its own (the publisher's may
// have been closed by an error).
func (r *rabbitSource) close() error {
	defer r.conn.Close()
	if !r.own {
		return nil
	}
	ch, err := r.conn.Channel()
	if err == nil {
		_, err = ch.QueueDelete(r.queue, false, false, false)
		_ = ch.Close()
	}
	if err != nil {
		return fmt.Errorf("delete queue %s: %w", r.queue, err)
	}
	return nil
}

// natsSource is a stream of the demo's own on a NATS JetStream server
// (memory storage, subjects "<stream>.>"); the daemon creates its durable
// consumer on it.
type natsSource struct {
	url    string
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string
	own    bool // the demo's own stream, deleted at the end; else (send) created if missing and kept
}

func openNATS(ctx context.Context, url, stream string, own bool, out io.Writer) (*natsSource, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s (is nats-server running with -js? set INBOXD_DEMO_NATS_URL): %w", natsurl.Redact(url), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	n := &natsSource{url: url, nc: nc, js: js, stream: stream, own: own}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: n.stream, Subjects: []string{n.stream + ".>"}, Storage: jetstream.MemoryStorage}
	if own {
		_, err = js.CreateStream(cctx, cfg)
	} else if _, err = js.Stream(cctx, n.stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		// A stream of a real run's: used as it is, created only when missing.
		cfg.Storage = jetstream.FileStorage
		_, err = js.CreateStream(cctx, cfg)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("create stream %s: %w", n.stream, err)
	}
	if own {
		fmt.Fprintf(out, "nats       JetStream server at %s, stream %q (deleted at the end)\n", natsurl.Redact(url), n.stream)
	}
	return n, nil
}

func (n *natsSource) name() string { return "NATS" }
func (n *natsSource) malformed() string {
	return fmt.Sprintf("with a %d-byte event id", ingest.MaxIdentifierBytes+1)
}
func (n *natsSource) env() []string {
	return []string{"INBOXD_NATS_URL=" + n.url, "INBOXD_NATS_STREAMS=" + n.stream}
}

// publish publishes evs to "<stream>.orders" in chunks whose acks it waits
// for, with event_id, event_type and key headers, as the Kafka records
// carry. The event id goes in event_id rather than Nats-Msg-Id: JetStream
// would drop the duplicates within its deduplication window itself, and the
// demo shows the inbox absorbing them. A NATS message without an event id
// is not malformed (its id is "<stream>/<sequence>@<time stored>"): the
// malformed one carries an id longer than ingest.MaxIdentifierBytes.
func (n *natsSource) publish(ctx context.Context, evs []event, sent *counter) error {
	subject := n.stream + ".orders"
	for start := 0; start < len(evs); start += chunk {
		end := min(start+chunk, len(evs))
		acks := make([]jetstream.PubAckFuture, 0, end-start)
		for _, e := range evs[start:end] {
			m := &nats.Msg{Subject: subject, Data: []byte(e.payload), Header: nats.Header{}}
			id := e.id
			if e.malformed {
				id, m.Data = strings.Repeat("x", ingest.MaxIdentifierBytes+1), []byte(`{"oops":"event id too long"}`)
			}
			m.Header.Set("event_id", id)
			m.Header.Set("event_type", e.typ)
			m.Header.Set("key", e.id)
			f, err := n.js.PublishMsgAsync(m)
			if err != nil {
				return err
			}
			acks = append(acks, f)
		}
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		sent.add(end - start)
	}
	return nil
}

// close deletes the stream, and with it the daemon's consumer.
func (n *natsSource) close() error {
	defer n.nc.Close()
	if !n.own {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.js.DeleteStream(ctx, n.stream); err != nil {
		return fmt.Errorf("delete stream %s: %w", n.stream, err)
	}
	return nil
}
