package faultsuite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxd/inboxd/internal/testkit"
)

// NATSConsumer is the durable consumer the scenarios' daemons share
// (INBOXD_NATS_CONSUMER's default).
const NATSConsumer = "inboxd"

// NATS is a scenario's JetStream stream on the real NATS server (subjects
// "<stream>.>", a name with a random suffix, deleted with its consumers
// when the test ends) and a publisher. It implements Broker.
type NATS struct {
	t      testing.TB
	url    *url.URL
	js     jetstream.JetStream
	stream string
}

// NewNATS creates the stream and the durable consumer NATSConsumer with
// explicit acks and ackWait (short, so what a killed daemon held is
// delivered again soon). A server that cannot be reached skips the test,
// or fails it under CI=true (testkit.Unavailable).
func NewNATS(t testing.TB, ackWait time.Duration) *NATS {
	t.Helper()
	u, err := url.Parse(testkit.NATSURL())
	if err != nil {
		t.Fatalf("INBOXD_TEST_NATS_URL: %v", err)
	}
	nc, err := nats.Connect(u.String(), nats.MaxReconnects(-1))
	if err != nil {
		testkit.Unavailable(t, fmt.Sprintf("NATS at %s unavailable (start it with nats-server -js): %v", u.Host, err))
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	n := &NATS{t: t, url: u, js: js, stream: "inboxd_fault_" + hex.EncodeToString(suffix[:])}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: n.stream, Subjects: []string{n.stream + ".>"},
		Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, n.stream); err != nil {
			t.Errorf("delete stream %s: %v", n.stream, err)
		}
	})
	if _, err := js.CreateConsumer(ctx, n.stream, jetstream.ConsumerConfig{Durable: NATSConsumer,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait}); err != nil {
		t.Fatal(err)
	}
	return n
}

// Kind is "nats".
func (n *NATS) Kind() string { return "nats" }

// Source is the stream's name.
func (n *NATS) Source() string { return n.stream }

// Upstream is the server's host:port.
func (n *NATS) Upstream() string { return n.url.Host }

// DaemonEnv consumes the stream through addr with the durable consumer
// NATSConsumer.
func (n *NATS) DaemonEnv(addr string) []string {
	u := *n.url
	u.Host = addr
	return []string{"INBOXD_NATS_URL=" + u.String(), "INBOXD_NATS_STREAMS=" + n.stream, "INBOXD_NATS_CONSUMER=" + NATSConsumer}
}

// Publish sends msgs to "<stream>.orders" with the id and type in the
// headers the daemon reads by default (event_id, event_type; not
// Nats-Msg-Id, so duplicates reach the consumer) and waits for every
// acknowledgement from the stream.
func (n *NATS) Publish(ctx context.Context, msgs []BrokerMessage) ([]bool, error) {
	ok := make([]bool, len(msgs))
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		msg := nats.NewMsg(n.stream + ".orders")
		if m.ID != "" {
			msg.Header.Set("event_id", m.ID)
		}
		msg.Header.Set("event_type", m.Type)
		msg.Data = m.Body
		f, err := n.js.PublishMsgAsync(msg)
		if err != nil {
			return ok, fmt.Errorf("publish to %s: %w", n.stream, err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
			ok[i] = true
		case err := <-f.Err():
			return ok, fmt.Errorf("publish to %s: %w", n.stream, err)
		case <-ctx.Done():
			return ok, fmt.Errorf("publish to %s: %w", n.stream, ctx.Err())
		}
	}
	return ok, nil
}

// Pending reports the durable consumer's messages not yet delivered and
// those delivered without acknowledgement.
func (n *NATS) Pending() (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := n.js.Consumer(ctx, n.stream, NATSConsumer)
	if err != nil {
		return false, err.Error()
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, err.Error()
	}
	return info.NumPending == 0 && info.NumAckPending == 0,
		fmt.Sprintf("consumer %s/%s: %d pending, %d waiting for their ack, %d redelivered", n.stream, NATSConsumer,
			info.NumPending, info.NumAckPending, info.NumRedelivered)
}
