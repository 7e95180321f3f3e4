package faultsuite

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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

// DescribeGroup reports, for failure output, the group's state and members
// and, per partition of the topic, the committed offset against the end of
// the log: a committed offset at the end with rows missing from the inbox
// is loss; a committed offset behind the end is a consumer that stalled.
func (k *Kafka) DescribeGroup(group string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(k.Client)
	var b strings.Builder
	groups, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return "describe group: " + err.Error()
	}
	g := groups[group]
	fmt.Fprintf(&b, "group %s: state %s, %d members", group, g.State, len(g.Members))
	for _, m := range g.Members {
		var parts []int32
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				parts = append(parts, tp.Partitions...)
			}
		}
		fmt.Fprintf(&b, "; %s (%s, %s) partitions %v", m.MemberID, m.ClientHost, socketOwner(m.ClientHost), parts)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return b.String() + "; fetch offsets: " + err.Error()
	}
	ends, err := adm.ListEndOffsets(ctx, k.Topic)
	if err != nil {
		return b.String() + "; end offsets: " + err.Error()
	}
	var lines []string
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(o.Topic, o.Partition)
		at := int64(-1)
		if ok {
			at = c.At
		}
		lines = append(lines, fmt.Sprintf("p%d committed=%d end=%d", o.Partition, at, o.Offset))
	})
	sort.Strings(lines)
	return b.String() + "\n  " + strings.Join(lines, "\n  ")
}

// WaitGroupSettled waits until group is Stable with exactly n members (n
// live consumers: a killed member still counted means its session has not
// expired yet), and fails t after timeout with the group's description. Scenarios call it before killing a consumer, so the
// kill hits a member in steady state rather than one still joining (and so
// that kfake, which in our runs kept a member killed mid-join forever
// although its session had long expired, is not left with an orphaned
// member holding partitions).
func (k *Kafka) WaitGroupSettled(t testing.TB, group string, n int, timeout time.Duration) {
	t.Helper()
	adm := kadm.NewClient(k.Client)
	ok := waitCond(timeout, 100*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		groups, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return false
		}
		g := groups[group]
		return g.State == "Stable" && len(g.Members) == n
	})
	if !ok {
		t.Fatalf("consumer group %s not settled with %d live members after %s: %s", group, n, timeout, k.DescribeGroup(group))
	}
}

// socketOwner names the local process that owns the TCP connection whose
// local end is hostport (via ss), or says that none does. A member's
// ClientHost is the connection its JoinGroup came on, which the client may
// have closed since: "closed" does not prove the member dead.
func socketOwner(hostport string) string {
	_, port, ok := strings.Cut(hostport, ":")
	if !ok {
		return "owner unknown"
	}
	out, err := exec.Command("ss", "-tnpH", "sport = :"+port).Output()
	if err != nil {
		return "owner unknown (ss: " + err.Error() + ")"
	}
	line := strings.TrimSpace(string(out))
	if line == "" {
		return "join connection closed"
	}
	if i := strings.Index(line, "users:"); i >= 0 {
		return line[i:]
	}
	return line
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
		pace := newPacer(s.Rate, batch)
		for start := 0; start < s.N; start += batch {
			if ctx.Err() != nil {
				return
			}
			if !pace.wait(ctx) {
				return
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
