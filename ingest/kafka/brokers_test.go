package kafka

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/syncbuf"
)

// The lag is read from the brokers, not from the messages fetched: before
// the consumer runs it is everything produced; once the batches are
// committed it is zero.
func TestConsumerLagFromTheBrokers(t *testing.T) {
	t.Parallel()
	b := setupKafka(t, 2)
	for i := range 30 {
		b.produce(t, b.event(int32(i%2), fmt.Sprintf("e-%d", i), "t", []byte("v")))
	}
	cfg := b.config().withDefaults()
	d, err := newDialer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	probe := newAdminProbe(cfg, d)
	defer probe.close()
	lag, err := probe.lag(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if lag[topicPartition{b.topic, 0}] != 15 || lag[topicPartition{b.topic, 1}] != 15 {
		t.Fatalf("lag before consuming = %v, want 15 on each partition", lag)
	}

	r := b.start(t, b.config(), "c1")
	b.waitCommitted(t, 30*time.Second)
	waitFor(t, 10*time.Second, func() (bool, string) {
		l0 := testutil.ToFloat64(r.c.Metrics.Lag.WithLabelValues(b.topic, "0"))
		l1 := testutil.ToFloat64(r.c.Metrics.Lag.WithLabelValues(b.topic, "1"))
		return l0 == 0 && l1 == 0, fmt.Sprintf("lag gauge %v/%v after committing everything", l0, l1)
	})
	b.produce(t, b.event(0, "late", "t", []byte("v")))
	b.waitCommitted(t, 30*time.Second)
}

// Ingest is ready only while the brokers answer: an unreachable cluster
// used to leave /readyz 200 and inboxd_ingest_ready 1.
func TestReadinessFollowsTheBrokers(t *testing.T) {
	t.Parallel()
	b := setupKafka(t, 1)
	r := b.start(t, b.config(), "c1")
	waitFor(t, 20*time.Second, func() (bool, string) { return r.c.Ready(), "ready with the brokers up" })
	b.cluster.Close()
	waitFor(t, 20*time.Second, func() (bool, string) {
		return !r.c.Ready() && testutil.ToFloat64(r.c.Metrics.Ready) == 0, "not ready once the brokers are gone"
	})
}

// The deduplication window is checked against each topic's retention.ms: a
// topic that keeps messages longer than processed rows are kept gets a
// warning naming it; one that keeps them for less does not.
func TestDedupWindowCheckedAgainstTopicRetention(t *testing.T) {
	t.Parallel()
	b := setupKafka(t, 1)
	ctx := context.Background()
	week, halfHour := "604800000", "1800000"
	for topic, ms := range map[string]*string{"kept-long": &week, "kept-short": &halfHour} {
		resp, err := b.admin.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": ms}, topic)
		if err != nil || resp.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
		}
	}
	cfg := b.config()
	cfg.Topics = []string{"kept-long", "kept-short"}
	cfg.DedupWindow = time.Hour
	var logs syncbuf.Buffer
	c, err := openKafka(cfg, b.db.Pool, zerolog.New(&logs), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startConsumer(t, c)
	waitFor(t, 20*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "INBOXD_RETENTION"), "the retention warning"
	})
	var warned []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "INBOXD_RETENTION") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], `"topic":"kept-long"`) || !strings.Contains(warned[0], `"level":"warn"`) {
		t.Fatalf("warnings = %q, want one warning naming kept-long", warned)
	}
}
