package faultsuite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka is an in-process Kafka-protocol cluster (franz-go's kfake) with one
// topic, and a producer client.
type Kafka struct {
	// Cluster is the in-process cluster.
	Cluster *kfake.Cluster
	// Client produces to Topic.
	Client *kgo.Client
	// Topic is the seeded topic.
	Topic string
}

// KafkaOptions tune NewKafka.
type KafkaOptions struct {
	// Partitions of the topic (default 4).
	Partitions int32
	// MaxMessageBytes raises the broker's message.max.bytes and the
	// producer's batch limit, for large payloads (default: kfake's and
	// kgo's defaults, about 1 MB).
	MaxMessageBytes int
}

// NewKafka starts a cluster seeded with topic and a producer for it; both
// are closed when t ends.
func NewKafka(t testing.TB, topic string, o KafkaOptions) *Kafka {
	t.Helper()
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1), kfake.SeedTopics(o.Partitions, topic),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}
	copts := []kgo.Opt{
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(0),
	}
	if o.MaxMessageBytes > 0 {
		opts = append(opts, kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(o.MaxMessageBytes)}))
		copts = append(copts, kgo.ProducerBatchMaxBytes(int32(o.MaxMessageBytes)), kgo.MaxBufferedBytes(o.MaxMessageBytes*16))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	copts = append(copts, kgo.SeedBrokers(c.ListenAddrs()...))
	cl, err := kgo.NewClient(copts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &Kafka{Cluster: c, Client: cl, Topic: topic}
}

// Brokers is the value for INBOXD_KAFKA_BROKERS.
func (k *Kafka) Brokers() string { return strings.Join(k.Cluster.ListenAddrs(), ",") }

// DaemonEnv is the ingest configuration for a daemon consuming the topic in
// group, with a short session timeout so a killed member's partitions move
// quickly.
func (k *Kafka) DaemonEnv(group string) []string {
	return []string{
		"INBOXD_KAFKA_BROKERS=" + k.Brokers(),
		"INBOXD_KAFKA_TOPICS=" + k.Topic,
		"INBOXD_KAFKA_GROUP=" + group,
		"INBOXD_KAFKA_SESSION_TIMEOUT=2s",
	}
}

// Record builds a message carrying the event id and type in the headers
// the daemon reads by default (event_id, event_type); the key is the id.
func Record(id, eventType string, payload []byte) *kgo.Record {
	return &kgo.Record{
		Key:   []byte(id),
		Value: payload,
		Headers: []kgo.RecordHeader{
			{Key: "event_id", Value: []byte(id)},
			{Key: "event_type", Value: []byte(eventType)},
		},
	}
}

// Stream describes a paced sequence of events.
type Stream struct {
	// N events, with ids Prefix + zero-padded index.
	N      int
	Prefix string
	// Type returns the event type of event i (default "http.effect").
	Type func(i int) string
	// Payload returns the payload of event i (default `{"n":i}`).
	Payload func(i int) []byte
	// Rate is events per second (0: as fast as the cluster takes them).
	Rate int
	// Batch is how many events go in one produce call (default Rate/20,
	// at least 1, at most 500; 100 when Rate is 0).
	Batch int
}

// ID returns the event id of event i.
func (s Stream) ID(i int) string { return fmt.Sprintf("%s%07d", s.Prefix, i) }

func (s Stream) typ(i int) string {
	if s.Type == nil {
		return "http.effect"
	}
	return s.Type(i)
}

func (s Stream) payload(i int) []byte {
	if s.Payload == nil {
		return fmt.Appendf(nil, `{"n":%d}`, i)
	}
	return s.Payload(i)
}

func (s Stream) batch() int {
	switch {
	case s.Batch > 0:
		return s.Batch
	case s.Rate == 0:
		return 100
	default:
		return min(max(s.Rate/20, 1), 500)
	}
}

// Production is a stream being produced: what the cluster acknowledged,
// and when.
type Production struct {
	mu      sync.Mutex
	acked   []string
	ackedAt map[string]time.Time
	failed  int
	err     error
	done    chan struct{}
	types   map[string]string
}

// Produce sends s in the background, paced at s.Rate, and records every
// event the cluster acknowledged. Produce errors are recorded (Err), not
// fatal: an unacknowledged event is not expected anywhere.
func (k *Kafka) Produce(ctx context.Context, s Stream) *Production {
	p := &Production{ackedAt: map[string]time.Time{}, done: make(chan struct{}), types: map[string]string{}}
	go func() {
		defer close(p.done)
		batch := s.batch()
		var interval time.Duration
		if s.Rate > 0 {
			interval = time.Duration(float64(time.Second) * float64(batch) / float64(s.Rate))
		}
		next := time.Now()
		for start := 0; start < s.N; start += batch {
			if ctx.Err() != nil {
				return
			}
			if interval > 0 {
				if d := time.Until(next); d > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				}
				next = next.Add(interval)
			}
			end := min(start+batch, s.N)
			recs := make([]*kgo.Record, 0, end-start)
			for i := start; i < end; i++ {
				recs = append(recs, Record(s.ID(i), s.typ(i), s.payload(i)))
			}
			pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			res := k.Client.ProduceSync(pctx, recs...)
			cancel()
			now := time.Now()
			p.mu.Lock()
			for _, r := range res {
				id := string(r.Record.Key)
				if r.Err != nil {
					p.failed++
					if p.err == nil {
						p.err = fmt.Errorf("produce %s: %w", id, r.Err)
					}
					continue
				}
				p.acked = append(p.acked, id)
				p.ackedAt[id] = now
				p.types[id] = header(r.Record, "event_type")
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Done is closed when every event was sent (or the context ended).
func (p *Production) Done() <-chan struct{} { return p.done }

// Wait waits until the stream is sent, failing t after timeout.
func (p *Production) Wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("producer did not finish within %s (%d acknowledged)", timeout, p.Count())
	}
}

// Count is how many events the cluster acknowledged so far.
func (p *Production) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// Acked returns the ids of the acknowledged events.
func (p *Production) Acked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.acked...)
}

// AckedOfType returns the ids of acknowledged events of type typ.
func (p *Production) AckedOfType(typ string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, id := range p.acked {
		if p.types[id] == typ {
			out = append(out, id)
		}
	}
	return out
}

// AckedAt returns when the cluster acknowledged the event id.
func (p *Production) AckedAt(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.ackedAt[id]
	return at, ok
}

// Err is the first produce error (nil when every event was acknowledged).
func (p *Production) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
