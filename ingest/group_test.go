package ingest

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
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

	f1 := testutil.ToFloat64(c1.c.metrics.MessagesFetched)
	f2 := testutil.ToFloat64(c2.c.metrics.MessagesFetched)
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
