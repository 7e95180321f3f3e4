package kafkapub

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/pubtest"
)

// The tests of a key's order when one of its rows fails after it was sent,
// on the real brokers: the rows after it are not published before it.

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
	p := kafkaPub(t, Config{Brokers: cluster.ListenAddrs(), MaxMessageBytes: 700})
	if !p.PipelinesKeys() {
		t.Fatal("the Kafka publisher does not pipeline a key's messages")
	}
	dest := outbox.Destination{Kind: outbox.KindKafka, Name: "t"}
	var msgs []outbox.Message
	for _, id := range []string{"k0", "k1", "k2"} {
		msgs = append(msgs, pubtest.Message(dest, id, "t", "k", []byte(pubtest.RandomText(300))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := p.Publish(ctx, msgs)
	pubtest.WantRefused(t, "the refused record", errs[0])
	for i := 1; i < 3; i++ {
		if errs[i] == nil {
			t.Errorf("%s, after the refused record of its key, was acknowledged", msgs[i].EventID)
		}
	}
	kb := &kafkaBundle{brokers: cluster.ListenAddrs()}
	pubtest.PublishAll(t, p, [][]outbox.Message{{pubtest.Message(dest, "after", "t", "k", []byte("{}"))}})
	if got := kb.consume(t, "t", 1); got[0].Headers[outbox.EventIDHeader] != "after" {
		t.Errorf("the topic's first record is %s, want the one published after the failure", got[0].Headers[outbox.EventIDHeader])
	}
}
