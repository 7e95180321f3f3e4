package faultsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// OutMessage is one message an outbox relay published, as a downstream
// consumer reads it, in the destination's order (per Kafka partition, per
// queue, per stream).
type OutMessage struct {
	// EventID is the event_id header.
	EventID string
	// InputID is the input_id header (the embedder's outbox.effect sets it
	// to the id of the input event it consumed).
	InputID string
	// Key is the Kafka message key or the key header.
	Key string
	// Seq is the payload's "seq" (the input's sequence number in its key).
	Seq int
}

// seqPayload is the payload of the outbox scenarios' inputs and outputs.
type seqPayload struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
	N   int    `json:"n"`
}

func parseSeq(b []byte) int {
	var p seqPayload
	if json.Unmarshal(b, &p) != nil {
		return -1
	}
	return p.Seq
}

// OutDest is where the embedder's outbox.effect publishes in an outbox
// scenario, and how the scenario reads it back.
type OutDest interface {
	// Kind is the destination's kind (kafka, amqp, nats).
	Kind() string
	// Destination is the outbox destination (FAULT_OUTBOX_DEST).
	Destination() string
	// PublishEnv configures a relay to publish to it (publish only).
	PublishEnv() []string
	// InboxEnv configures a second inbox to consume what was published.
	InboxEnv() []string
	// Source is the second inbox's source column for those messages.
	Source() string
	// Collect reads everything published so far (call it once the outbox
	// holds no pending row), in the destination's order. For RabbitMQ it
	// drains the queue and passes every message on, unchanged and in
	// order, to the second inbox's queue.
	Collect(t testing.TB) []OutMessage
}

// kafkaOut is an outbox destination topic on a scenario's kfake cluster.
type kafkaOut struct {
	k     *Kafka
	topic string
	group string
}

// newKafkaOut creates topic on k's cluster.
func newKafkaOut(t testing.TB, k *Kafka, topic string, partitions int32) *kafkaOut {
	t.Helper()
	createTopic(t, k, topic, partitions)
	return &kafkaOut{k: k, topic: topic, group: "second-inbox"}
}

// createTopic creates topic on k's cluster.
func createTopic(t testing.TB, k *Kafka, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(k.Client).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func (o *kafkaOut) Kind() string         { return "kafka" }
func (o *kafkaOut) Destination() string  { return "kafka:" + o.topic }
func (o *kafkaOut) PublishEnv() []string { return nil } // the ingest's brokers
func (o *kafkaOut) Source() string       { return o.topic }
func (o *kafkaOut) InboxEnv() []string {
	return []string{"INBOXD_KAFKA_BROKERS=" + o.k.Brokers(), "INBOXD_KAFKA_TOPICS=" + o.topic,
		"INBOXD_KAFKA_GROUP=" + o.group, "INBOXD_KAFKA_SESSION_TIMEOUT=2s"}
}

// Collect reads the topic from the start to its end offsets, partition
// after partition (a key lives in one partition).
func (o *kafkaOut) Collect(t testing.TB) []OutMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(o.k.Client).ListEndOffsets(ctx, o.topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", o.topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(l kadm.ListedOffset) {
		if l.Offset > 0 {
			want[l.Partition] = l.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.k.Cluster.ListenAddrs()...), kgo.ConsumeTopics(o.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	byPart := map[int32][]OutMessage{}
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v; partitions not read to their end: %v", o.topic, ctx.Err(), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			byPart[r.Partition] = append(byPart[r.Partition], OutMessage{EventID: header(r, "event_id"),
				InputID: header(r, "input_id"), Key: string(r.Key), Seq: parseSeq(r.Value)})
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	parts := make([]int32, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	var out []OutMessage
	for _, p := range parts {
		out = append(out, byPart[p]...)
	}
	return out
}

// natsOut is an outbox destination subject captured by a scenario's
// stream (NewNATS: subjects "<stream>.>", durable consumer for the second
// inbox).
type natsOut struct{ n *NATS }

func (o *natsOut) Kind() string         { return "nats" }
func (o *natsOut) Destination() string  { return "nats:" + o.n.stream + ".out" }
func (o *natsOut) PublishEnv() []string { return []string{"INBOXD_NATS_URL=" + o.n.url.String()} }
func (o *natsOut) Source() string       { return o.n.stream }
func (o *natsOut) InboxEnv() []string   { return o.n.DaemonEnv(o.n.url.Host) }

// StreamMsgs is the number of messages the stream holds.
func (o *natsOut) StreamMsgs(t testing.TB) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := o.n.js.Stream(ctx, o.n.stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Collect reads the stream from its first message to its last with an
// ordered consumer (the durable one stays the second inbox's).
func (o *natsOut) Collect(t testing.TB) []OutMessage {
	t.Helper()
	want := o.StreamMsgs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := o.n.js.OrderedConsumer(ctx, o.n.stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []OutMessage
	for uint64(len(out)) < want {
		msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("reading stream %s: %v after %d of %d messages", o.n.stream, err, len(out), want)
		}
		h := msg.Headers()
		out = append(out, OutMessage{EventID: h.Get("event_id"), InputID: h.Get("input_id"), Key: h.Get("key"),
			Seq: parseSeq(msg.Data())})
	}
	return out
}

// amqpOut is an outbox destination queue (amqp:/<queue>, the default
// exchange) and a second queue the scenario passes every message on to,
// for the second inbox: the test's own reading of the first queue takes
// the messages.
type amqpOut struct {
	q, tee *RabbitMQ
}

func (o *amqpOut) Kind() string         { return "amqp" }
func (o *amqpOut) Destination() string  { return "amqp:/" + o.q.queue }
func (o *amqpOut) PublishEnv() []string { return []string{"INBOXD_AMQP_URL=" + o.q.url.String()} }
func (o *amqpOut) Source() string       { return o.tee.queue }
func (o *amqpOut) InboxEnv() []string   { return o.tee.DaemonEnv(o.tee.url.Host) }

// Collect drains the queue, in its order, and republishes every message
// (headers, properties and body as they came) to the tee queue.
func (o *amqpOut) Collect(t testing.TB) []OutMessage {
	t.Helper()
	ch, err := o.q.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var out []OutMessage
	var pass []amqp.Publishing
	for {
		d, ok, err := ch.Get(o.q.queue, false)
		if err != nil {
			t.Fatalf("get from %s: %v", o.q.queue, err)
		}
		if !ok {
			break
		}
		str := func(k string) string { s, _ := d.Headers[k].(string); return s }
		out = append(out, OutMessage{EventID: str("event_id"), InputID: str("input_id"), Key: str("key"), Seq: parseSeq(d.Body)})
		pass = append(pass, amqp.Publishing{Headers: d.Headers, MessageId: d.MessageId, Type: d.Type,
			ContentType: d.ContentType, Body: d.Body, DeliveryMode: amqp.Persistent})
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for start := 0; start < len(pass); start += 200 {
		var dcs []*amqp.DeferredConfirmation
		for _, p := range pass[start:min(start+200, len(pass))] {
			dc, err := o.tee.ch.PublishWithDeferredConfirmWithContext(ctx, "", o.tee.queue, true, false, p)
			if err != nil {
				t.Fatalf("pass on to %s: %v", o.tee.queue, err)
			}
			dcs = append(dcs, dc)
		}
		for _, dc := range dcs {
			if acked, err := dc.WaitContext(ctx); err != nil || !acked {
				t.Fatalf("pass on to %s: confirmed %v, %v", o.tee.queue, acked, err)
			}
		}
	}
	return out
}

// KeyedInputs produces the outbox scenarios' inputs to a topic: n events
// over keys keys (event i has key k<i mod keys> and the sequence number
// i/keys in its key, in the payload), in order, paced at rate, with the
// default (key hash) partitioner so that a key's events stay in one
// partition, in order.
type KeyedInputs struct {
	mu    sync.Mutex
	acked []string
	keyOf map[string]string
	seqOf map[string]int
	err   error
	done  chan struct{}
	sent  int
}

// ProduceKeyed starts producing the inputs, of type outbox.effect.
func ProduceKeyed(ctx context.Context, t testing.TB, k *Kafka, topic string, n, keys, rate int) *KeyedInputs {
	t.Helper()
	return ProduceKeyedOf(ctx, t, k, topic, "outbox.effect", n, keys, rate)
}

// ProduceKeyedOf is ProduceKeyed with inputs of event type typ.
func ProduceKeyedOf(ctx context.Context, t testing.TB, k *Kafka, topic, typ string, n, keys, rate int) *KeyedInputs {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Cluster.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	p := &KeyedInputs{keyOf: map[string]string{}, seqOf: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cl.Close()
		const batch = 20
		pace := newPacer(rate, batch)
		for start := 0; start < n; start += batch {
			if !pace.wait(ctx) {
				return
			}
			var recs []*kgo.Record
			for i := start; i < min(start+batch, n); i++ {
				id, key := fmt.Sprintf("in-%06d", i), fmt.Sprintf("k%02d", i%keys)
				body, _ := json.Marshal(seqPayload{Key: key, Seq: i / keys, N: i})
				r := Record(id, typ, body)
				r.Key = []byte(key)
				recs = append(recs, r)
			}
			pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			res := cl.ProduceSync(pctx, recs...)
			cancel()
			p.mu.Lock()
			for _, r := range res {
				if r.Err != nil {
					if p.err == nil {
						p.err = fmt.Errorf("produce %s: %w", header(r.Record, "event_id"), r.Err)
					}
					continue
				}
				id := header(r.Record, "event_id")
				p.acked = append(p.acked, id)
				p.keyOf[id] = string(r.Record.Key)
				p.seqOf[id] = parseSeq(r.Record.Value)
			}
			p.sent = min(start+batch, n)
			p.mu.Unlock()
		}
	}()
	return p
}

// Wait waits until every input was sent, failing t after timeout or on a
// produce error.
func (p *KeyedInputs) Wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("inputs not produced within %s", timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		t.Fatalf("producer: %v", p.err)
	}
}

// Finished reports whether every input was sent.
func (p *KeyedInputs) Finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Acked returns the ids of the inputs the cluster acknowledged.
func (p *KeyedInputs) Acked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.acked)
}

// OutReport is what CheckOutMessages found.
type OutReport struct {
	// Wire is the number of messages read, Distinct the number of distinct
	// event ids among them; Duplicates = Wire - Distinct.
	Wire, Distinct, Duplicates int
}

// CheckOutMessages checks msgs, what the destination holds, against the
// inputs: every input has exactly one distinct output event id (grouped by
// the input_id header), no output belongs to no input, and per key the
// first occurrences of the outputs come in input order (their sequence
// numbers increase). It fails t for each violation, listing a few.
func CheckOutMessages(t testing.TB, msgs []OutMessage, inputs []string) OutReport {
	t.Helper()
	ids := map[string]map[string]bool{} // input id → output event ids
	seen := map[string]bool{}           // output event ids
	lastSeq := map[string]int{}
	var disorder []string
	for _, m := range msgs {
		if ids[m.InputID] == nil {
			ids[m.InputID] = map[string]bool{}
		}
		ids[m.InputID][m.EventID] = true
		if seen[m.EventID] {
			continue
		}
		seen[m.EventID] = true
		if last, ok := lastSeq[m.Key]; ok && m.Seq <= last {
			disorder = append(disorder, fmt.Sprintf("key %s: seq %d (input %s) first seen after seq %d", m.Key, m.Seq, m.InputID, last))
		}
		lastSeq[m.Key] = max(lastSeq[m.Key], m.Seq)
	}
	var missing, twice, stray []string
	want := map[string]bool{}
	for _, id := range inputs {
		want[id] = true
		switch n := len(ids[id]); {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s→%d ids", id, n))
		}
	}
	for id := range ids {
		if !want[id] {
			stray = append(stray, id)
		}
	}
	few := func(s []string) string { return strings.Join(s[:min(len(s), 5)], ", ") }
	if len(missing) > 0 {
		t.Errorf("LOST OUTPUT: %d of %d inputs have no output message, e.g. %s", len(missing), len(inputs), few(missing))
	}
	if len(twice) > 0 {
		t.Errorf("OUTPUT TWICE: %d inputs have more than one distinct output event id (a rolled-back run published, or a run committed twice), e.g. %s", len(twice), few(twice))
	}
	if len(stray) > 0 {
		t.Errorf("STRAY OUTPUT: %d output messages name no input, e.g. %s", len(stray), few(stray))
	}
	if len(disorder) > 0 {
		t.Errorf("ORDER: %d first occurrences out of their key's input order, e.g. %s", len(disorder), few(disorder))
	}
	return OutReport{Wire: len(msgs), Distinct: len(seen), Duplicates: len(msgs) - len(seen)}
}
