package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// kafkaBundle is one test's world: its own database, its own in-process Kafka
// cluster (kfake) with one topic, a franz-go producer and admin client.
type kafkaBundle struct {
	db       *pgtest.DB
	cluster  *kfake.Cluster
	brokers  []string
	topic    string
	group    string
	producer *kgo.Client
	admin    *kadm.Client
}

func setupKafka(t testing.TB, partitions int32) *kafkaBundle {
	t.Helper()
	return setupKafkaWith(t, partitions, nil, nil)
}

// setupKafkaWith is setupKafka with extra cluster options (TLS, SASL) and the
// matching client options for the producer and admin client.
func setupKafkaWith(t testing.TB, partitions int32, opts []kfake.Opt, clientOpts []kgo.Opt) *kafkaBundle {
	t.Helper()
	b := &kafkaBundle{db: setupDB(t), topic: "orders", group: "inboxd-test"}
	opts = append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, b.topic),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}, opts...)
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	b.cluster = cluster
	b.brokers = cluster.ListenAddrs()
	b.producer = newKgo(t, b.brokers, clientOpts...)
	b.admin = kadm.NewClient(b.producer)
	return b
}

func setupDB(t testing.TB) *pgtest.DB {
	t.Helper()
	return pgtest.New(t)
}

func newKgo(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// config is a consumer configuration tuned for fast tests: short heartbeats
// and batch timeouts, 1 KiB payload limit.
func (b *kafkaBundle) config() Config {
	return Config{
		Brokers:           b.brokers,
		Topics:            []string{b.topic},
		Group:             b.group,
		SessionTimeout:    3 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout:  5 * time.Second,
		LagInterval:       100 * time.Millisecond,
		PipelineConfig: ingest.PipelineConfig{
			BatchSize:       50,
			BatchTimeout:    20 * time.Millisecond,
			RetryBackoffMin: 10 * time.Millisecond,
			RetryBackoffMax: 200 * time.Millisecond,
			CloseTimeout:    10 * time.Second,
			Mapping:         ingest.MapOptions{MaxPayload: 1024},
		},
	}
}

// running is a consumer whose Run is in progress.
type running struct {
	c    *kafkaConsumer
	stop func() error
}

// start creates a consumer on the bundle's database and runs it until stop is
// called (or the test ends).
func (b *kafkaBundle) start(t testing.TB, cfg Config, name string) *running {
	t.Helper()
	logger := zerolog.New(zerolog.NewTestWriter(t)).With().Str("consumer", name).Logger().Level(zerolog.InfoLevel)
	c, err := openKafka(cfg, b.db.Pool, logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return startConsumer(t, c)
}

func startConsumer(t testing.TB, c *kafkaConsumer) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = fmt.Errorf("Run did not return within 30s of cancellation")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &running{c: c, stop: stop}
}

// event is a record carrying the contract headers.
func (b *kafkaBundle) event(partition int32, id, typ string, value []byte) *kgo.Record {
	r := &kgo.Record{Topic: b.topic, Partition: partition, Value: value}
	if id != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "event_id", Value: []byte(id)})
	}
	if typ != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "event_type", Value: []byte(typ)})
	}
	return r
}

func (b *kafkaBundle) produce(t testing.TB, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// committed returns the group's committed offsets per partition of the topic.
func (b *kafkaBundle) committed(t testing.TB) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.admin.FetchOffsets(ctx, b.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{} // nothing committed yet
	}
	if err != nil {
		t.Fatalf("fetch committed offsets: %v", err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			t.Fatalf("fetch committed offset of partition %d: %v", o.Partition, o.Err)
		}
		if o.Topic == b.topic && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// endOffsets returns the topic's end offsets per partition.
func (b *kafkaBundle) endOffsets(t testing.TB) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listed, err := b.admin.ListEndOffsets(ctx, b.topic)
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	out := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// countRows counts the rows of the inbox (or of table, when renamed).
func (b *kafkaBundle) countRows(t testing.TB, table string) int {
	t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

// waitCommitted waits until the group's committed offsets reach the end of
// every partition.
func (b *kafkaBundle) waitCommitted(t testing.TB, timeout time.Duration) {
	t.Helper()
	end := b.endOffsets(t)
	waitFor(t, timeout, func() (bool, string) {
		got := b.committed(t)
		for p, e := range end {
			if got[p] != e {
				return false, fmt.Sprintf("committed %v, end offsets %v", got, end)
			}
		}
		return true, ""
	})
}
