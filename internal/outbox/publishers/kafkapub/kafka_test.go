package kafkapub

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/ingest"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/pubtest"
)

// kafkaBundle is one test's in-process Kafka cluster (kfake), an admin
// client and a publisher.
type kafkaBundle struct {
	brokers []string
	admin   *kadm.Client
	pub     *Publisher
}

func setupKafkaPub(t *testing.T, cfg Config) *kafkaBundle {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	b := &kafkaBundle{brokers: cluster.ListenAddrs()}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	b.admin = kadm.NewClient(cl)
	cfg.Brokers = b.brokers
	b.pub, err = New(cfg, pubtest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.pub.Close() })
	return b
}

// seededCluster starts a one-broker kfake cluster with the topic "t" of
// one partition, stopped when the test ends: for tests that control its
// answers.
func seededCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	return cluster
}

// kafkaPub is a Publisher of cfg, closed when the test ends.
func kafkaPub(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	p, err := New(cfg, pubtest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// topic creates a topic of the test's own with partitions and configs, and
// deletes it when the test ends.
func (b *kafkaBundle) topic(t *testing.T, partitions int32, configs map[string]*string) string {
	t.Helper()
	name := pubtest.RandomName("outbox-test-")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.admin.CreateTopic(ctx, partitions, 1, configs, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := b.admin.DeleteTopic(ctx, name); err != nil {
			t.Errorf("delete topic %s: %v", name, err)
		}
	})
	return name
}

// consume reads n records of topic from its start, each mapped by inboxd's
// Kafka ingest too.
func (b *kafkaBundle) consume(t *testing.T, topic string, n int) []pubtest.Received {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []pubtest.Received
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records of %d: %v", len(got), n, ctx.Err())
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			km := kafka.Message{Topic: r.Topic, Partition: int(r.Partition), Offset: r.Offset, Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				km.Headers = append(km.Headers, kafka.Header{Key: h.Key, Value: h.Value})
			}
			got = append(got, pubtest.Received{Key: string(r.Key),
				Headers: pubtest.HeaderMap(r.Headers, func(h kgo.RecordHeader) (string, string) { return h.Key, string(h.Value) }),
				Payload: r.Value,
				Row:     kafkamap.MapMessage(km, ingest.MapOptions{})})
		})
	}
	return got
}

// 200 messages over four keys, in three Publish calls, are read back in
// order per key (a key's partition), with the key as the record key and
// every header intact; inboxd's own Kafka ingest maps each to its event
// id, type and key.
func TestKafkaPublishKeepsOrderAndHeaders(t *testing.T) {
	t.Parallel()
	b := setupKafkaPub(t, Config{})
	topic := b.topic(t, 3, nil)
	batches := pubtest.OrderedBatches(outbox.Destination{Kind: outbox.KindKafka, Name: topic}, 200, 4, 3)
	pubtest.PublishAll(t, b.pub, batches)
	if !b.pub.Ready() {
		t.Error("not ready after publishing")
	}
	pubtest.CheckReceived(t, batches, b.consume(t, topic, 200))
}

// A message over MaxMessageBytes is refused by Check; one under it but
// over the topic's max.message.bytes is refused by the broker; a message
// after them is published.
func TestKafkaRefusesTooLarge(t *testing.T) {
	t.Parallel()
	b := setupKafkaPub(t, Config{MaxMessageBytes: 64 << 10})
	limit := "2048"
	small := b.topic(t, 1, map[string]*string{"max.message.bytes": &limit})
	dest := outbox.Destination{Kind: outbox.KindKafka, Name: small}

	big := pubtest.Message(dest, "big", "t", "k", make([]byte, 64<<10))
	pubtest.WantRefused(t, "Check of a message over MaxMessageBytes", b.pub.Check(big))
	if err := b.pub.Check(pubtest.Message(dest, "ok", "t", "k", make([]byte, 60<<10))); err != nil {
		t.Errorf("Check of a message under MaxMessageBytes: %v", err)
	}

	// Alone in its batch: the broker refuses a whole batch over the
	// topic's limit, batch-mates included (hence MaxMessageBytes must not
	// exceed the topics' max.message.bytes).
	// Random bytes: the producer compresses, zeros would fit.
	_, err := pubtest.PublishOne(b.pub, pubtest.Message(dest, "over-topic-limit", "t", "k", []byte(pubtest.RandomText(8192))), 20*time.Second)
	pubtest.WantRefused(t, "a message over the topic's max.message.bytes", err)
	if _, err := pubtest.PublishOne(b.pub, pubtest.Message(dest, "fits", "t", "k", []byte("{}")), 20*time.Second); err != nil {
		t.Errorf("a message under the topic's limit, after: %v", err)
	}
}

// A missing topic (topics are never created) fails fast with an error that
// is not a refusal; the same publisher then publishes to a topic that
// exists.
func TestKafkaMissingTopicIsNotRefused(t *testing.T) {
	t.Parallel()
	b := setupKafkaPub(t, Config{})
	topic := b.topic(t, 1, nil)
	const deadline = 15 * time.Second
	took, err := pubtest.PublishOne(b.pub, pubtest.Message(outbox.Destination{Kind: outbox.KindKafka, Name: pubtest.RandomName("missing-")}, "m", "t", "k", []byte("{}")), deadline)
	pubtest.WantTransient(t, "a missing topic", err, took, deadline)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a missing topic took the whole deadline (%v): want the unknown-topic retries to end it", err)
	}
	if err != nil && !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a missing topic: %v, want it said", err)
	}
	if _, err := pubtest.PublishOne(b.pub, pubtest.Message(outbox.Destination{Kind: outbox.KindKafka, Name: topic}, "after", "t", "k", []byte("{}")), deadline); err != nil {
		t.Errorf("an existing topic after the missing one: %v", err)
	}
	if got := b.consume(t, topic, 1); got[0].Headers[outbox.EventIDHeader] != "after" {
		t.Errorf("read back %v", got[0].Headers)
	}
}

// Publish returns within its ctx when the broker never answers, the
// messages failing with the ctx's error (not a refusal).
func TestKafkaPublishReturnsWithinCtx(t *testing.T) {
	t.Parallel()
	cluster := seededCluster(t)
	// Every produce request is held unanswered.
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		return nil, nil, true
	})
	p := kafkaPub(t, Config{Brokers: cluster.ListenAddrs()})
	const deadline = 2 * time.Second
	took, err := pubtest.PublishOne(p, pubtest.Message(outbox.Destination{Kind: outbox.KindKafka, Name: "t"}, "held", "t", "k", []byte("{}")), deadline)
	pubtest.WantTransient(t, "a produce never answered", err, took, deadline)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the ctx's error", err)
	}
}
