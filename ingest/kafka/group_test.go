package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Two consumers in one group split the partitions and together ingest every
// event exactly once; when one leaves, the other takes its partitions over.
func TestTwoConsumersSplitPartitions(t *testing.T) {
	t.Parallel()
	const partitions = 4
	b := setupKafka(t, partitions)

	cfg1, cfg2 := b.config(), b.config()
	cfg1.ClientID, cfg2.ClientID = "consumer-1", "consumer-2"
	c1 := b.start(t, cfg1, "c1")
	c2 := b.start(t, cfg2, "c2")

	// Wait for a stable group in which each member owns partitions.
	waitFor(t, 30*time.Second, func() (bool, string) {
		return b.assignment(t, map[string]int{"consumer-1": 1, "consumer-2": 1})
	})

	sent := 0
	produce := func(n int) {
		var recs []*kgo.Record
		for range n {
			recs = append(recs, b.event(int32(sent%partitions), fmt.Sprintf("ev-%d", sent), "t", []byte(fmt.Sprint(sent))))
			sent++
		}
		b.produce(t, recs...)
	}
	produce(200)
	b.waitCommitted(t, 30*time.Second)

	f1 := testutil.ToFloat64(c1.c.Metrics.MessagesFetched)
	f2 := testutil.ToFloat64(c2.c.Metrics.MessagesFetched)
	if f1 == 0 || f2 == 0 {
		t.Errorf("fetched %v and %v messages: the partitions were not split", f1, f2)
	}
	if got := b.countRows(t, "inbox"); got != 200 {
		t.Errorf("%d rows, want 200", got)
	}
	t.Logf("consumer-1 fetched %v, consumer-2 fetched %v", f1, f2)

	// consumer-1 leaves; consumer-2 gets everything.
	if err := c1.stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() (bool, string) {
		return b.assignment(t, map[string]int{"consumer-2": partitions})
	})
	produce(100)
	b.waitCommitted(t, 30*time.Second)
	var rows, distinct int
	if err := b.db.Pool.QueryRow(t.Context(), "SELECT count(*), count(DISTINCT event_id) FROM inbox").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != sent || distinct != sent {
		t.Errorf("%d rows (%d distinct), want %d", rows, distinct, sent)
	}
}

// assignment reports whether the group is stable with exactly the members
// named (by client id) and each owning at least the given partition count.
func (b *kafkaBundle) assignment(t *testing.T, want map[string]int) (bool, string) {
	t.Helper()
	groups, err := b.admin.DescribeGroups(t.Context(), b.group)
	if err != nil {
		return false, fmt.Sprintf("describe group: %v", err)
	}
	g := groups[b.group]
	owned := map[string]int{}
	for _, m := range g.Members {
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				owned[m.ClientID] += len(tp.Partitions)
			}
		} else {
			owned[m.ClientID] += 0
		}
	}
	desc := fmt.Sprintf("group state %s, partitions owned by client id %v, want at least %v", g.State, owned, want)
	if g.State != "Stable" || len(owned) != len(want) {
		return false, desc
	}
	for id, n := range want {
		if owned[id] < n {
			return false, desc
		}
	}
	return true, desc
}

// closeTimedReader is a *kafka.Reader whose Close reports how long it took.
type closeTimedReader struct {
	*kafka.Reader
	took chan time.Duration
}

func (r *closeTimedReader) Close() error {
	start := time.Now()
	err := r.Reader.Close()
	r.took <- time.Since(start)
	return err
}

// The known trap: a member died without leaving (SIGKILL), so a new
// member's join waits for it, and kafka-go's Reader.Close blocks while that
// join is pending. Run must still return within CloseTimeout; nothing is lost
// since offsets are committed per batch.
func TestRunReturnsWhileGroupJoinIsPending(t *testing.T) {
	t.Parallel()
	b := setupKafka(t, 1)
	ctx := t.Context()

	// A "killed" member: it joins and syncs, then never heartbeats or
	// leaves. Its session and rebalance timeouts are long.
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group = b.group
	join.SessionTimeoutMillis = 60_000
	join.RebalanceTimeoutMillis = 60_000
	join.ProtocolType = "consumer"
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name = "range"
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{b.topic}
	proto.Metadata = meta.AppendTo(nil)
	join.Protocols = append(join.Protocols, proto)
	joined, err := join.RequestWith(ctx, b.producer)
	if err == nil && joined.ErrorCode == kerr.MemberIDRequired.Code {
		join.MemberID = joined.MemberID
		joined, err = join.RequestWith(ctx, b.producer)
	}
	if err == nil {
		err = kerr.ErrorForCode(joined.ErrorCode)
	}
	if err != nil {
		t.Fatalf("phantom join: %v", err)
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.Generation, sync.MemberID = b.group, joined.Generation, joined.MemberID
	sync.ProtocolType, sync.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	assignment := kmsg.NewConsumerMemberAssignment()
	at := kmsg.NewConsumerMemberAssignmentTopic()
	at.Topic, at.Partitions = b.topic, []int32{0}
	assignment.Topics = append(assignment.Topics, at)
	ga := kmsg.NewSyncGroupRequestGroupAssignment()
	ga.MemberID, ga.MemberAssignment = joined.MemberID, assignment.AppendTo(nil)
	sync.GroupAssignment = append(sync.GroupAssignment, ga)
	synced, err := sync.RequestWith(ctx, b.producer)
	if err == nil {
		err = kerr.ErrorForCode(synced.ErrorCode)
	}
	if err != nil {
		t.Fatalf("phantom sync: %v", err)
	}

	cfg := b.config()
	cfg.CloseTimeout = 300 * time.Millisecond
	c, err := openKafka(cfg, b.db.Pool, zerolog.New(zerolog.NewTestWriter(t)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	took := make(chan time.Duration, 1)
	c.newReader = func(rc kafka.ReaderConfig) messageReader {
		return &closeTimedReader{Reader: kafka.NewReader(rc), took: took}
	}
	r := startConsumer(t, c)
	waitFor(t, 10*time.Second, func() (bool, string) {
		groups, err := b.admin.DescribeGroups(ctx, b.group)
		state := groups[b.group].State
		return err == nil && state == "PreparingRebalance", fmt.Sprintf("group state %q (%v)", state, err)
	})
	start := time.Now()
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if ret := time.Since(start); ret > 3*time.Second {
		t.Errorf("Run took %s to return with a join pending; CloseTimeout is %s", ret, cfg.CloseTimeout)
	}
	// Release the pending join (as the group eventually would) so that the
	// abandoned Close finishes, and check that it really was blocked.
	b.cluster.Close()
	select {
	case d := <-took:
		t.Logf("kafka-go Reader.Close took %s; Run returned after %s", d.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		if d < cfg.CloseTimeout {
			t.Errorf("Reader.Close took %s, less than CloseTimeout: the join was not pending, the test proves nothing", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("kafka-go Reader.Close did not return after the cluster closed")
	}
}
