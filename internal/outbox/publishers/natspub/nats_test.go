package natspub

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/ingest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxd/inboxd/internal/ingestcore/natsmap"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/pubtest"
	"github.com/inboxd/inboxd/internal/testkit"
	"github.com/inboxd/inboxd/internal/testkit/natstest"
)

// natsBundle is one test's stream on the real NATS server (subjects
// "<stream>.>") and a connection to read it.
type natsBundle struct {
	stream string
	js     jetstream.JetStream
}

// setupNATSPub creates a stream of the test's own, adjusted by opts, and
// deletes it when the test ends.
func setupNATSPub(t *testing.T, opts ...func(*jetstream.StreamConfig)) *natsBundle {
	t.Helper()
	s := natstest.New(t, "outbox_test_", opts...)
	return &natsBundle{stream: s.Name, js: s.JS}
}

func newNATSPub(t *testing.T, url string) *Publisher {
	t.Helper()
	p, err := New(Config{URL: url}, pubtest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = p.Close() // idempotent
	})
	return p
}

func (b *natsBundle) dest(subject string) outbox.Destination {
	return outbox.Destination{Kind: outbox.KindNATS, Name: b.stream + "." + subject}
}

// messages is how many messages the stream holds.
func (b *natsBundle) messages(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// consume reads the stream's n messages from its start, each mapped by
// inboxd's NATS ingest too, and checks their Nats-Msg-Id.
func (b *natsBundle) consume(t *testing.T, n int) []pubtest.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := b.js.OrderedConsumer(ctx, b.stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var got []pubtest.Received
	for len(got) < n {
		batch, err := cons.Fetch(n-len(got), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			hs := map[string]string{}
			for k := range m.Headers() {
				hs[k] = m.Headers().Get(k)
			}
			if id := hs[jetstream.MsgIDHeader]; id == "" || id != hs[outbox.EventIDHeader] {
				t.Errorf("Nats-Msg-Id %q, event_id %q", id, hs[outbox.EventIDHeader])
			}
			got = append(got, pubtest.Received{Key: hs[outbox.KeyHeader], Headers: hs, Payload: m.Data(),
				Row: natsmap.MapNATS(b.stream, m, ingest.MapOptions{})})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d messages of %d", len(got), n)
		}
	}
	return got
}

// 200 messages over four keys, in three Publish calls, are read back in
// order, with Nats-Msg-Id = event_id, the key and every header; inboxd's
// own NATS ingest maps each to its event id, type and key.
func TestNATSPublishKeepsOrderAndHeaders(t *testing.T) {
	t.Parallel()
	b := setupNATSPub(t)
	p := newNATSPub(t, testkit.NATSURL())
	if p.Ready() {
		t.Error("ready before the first Publish (it does not connect in outbox.New)")
	}
	batches := pubtest.OrderedBatches(b.dest("orders"), 200, 4, 3)
	pubtest.PublishAll(t, p, batches)
	if !p.Ready() {
		t.Error("not ready after publishing")
	}
	pubtest.CheckReceived(t, batches, b.consume(t, 200))
}

// The same event id published twice, in one call and in a later one, is
// acknowledged each time and held once by the stream.
func TestNATSSameEventIDIsStoredOnce(t *testing.T) {
	t.Parallel()
	b := setupNATSPub(t)
	p := newNATSPub(t, testkit.NATSURL())
	m := pubtest.Message(b.dest("orders"), "once", "t", "k", []byte("{}"))
	pubtest.PublishAll(t, p, [][]outbox.Message{{m, m}, {m}})
	if got := b.messages(t); got != 1 {
		t.Errorf("the stream holds %d messages, want 1", got)
	}
}

// A message over the server's max_payload is refused by Check, and by
// Publish when sent anyway; one over the stream's max_msg_size is refused
// by the server; a message after them is published.
func TestNATSRefusesTooLarge(t *testing.T) {
	t.Parallel()
	b := setupNATSPub(t, func(sc *jetstream.StreamConfig) { sc.MaxMsgSize = 4096 })
	p := newNATSPub(t, testkit.NATSURL())
	dest := b.dest("orders")
	huge := pubtest.Message(dest, "huge", "t", "k", make([]byte, DefaultMaxPayload))
	pubtest.WantRefused(t, "Check before connecting", p.Check(huge))
	_, err := pubtest.PublishOne(p, huge, 10*time.Second)
	pubtest.WantRefused(t, "Publish of a message over max_payload", err)
	pubtest.WantRefused(t, "Check once connected", p.Check(huge))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := p.Publish(ctx, []outbox.Message{
		pubtest.Message(dest, "over-stream-limit", "t", "k", make([]byte, 8192)),
		pubtest.Message(dest, "fits", "t", "k", []byte("{}")),
	})
	pubtest.WantRefused(t, "a message over the stream's max_msg_size", errs[0])
	if errs[1] != nil {
		t.Errorf("the message after it: %v", errs[1])
	}
	if got := b.messages(t); got != 1 {
		t.Errorf("the stream holds %d messages, want 1", got)
	}
}

// A subject no stream stores (no responders) is not a refusal, and comes
// back well within the deadline; the same publisher then publishes to a
// stream.
func TestNATSMissingStreamIsNotRefused(t *testing.T) {
	t.Parallel()
	b := setupNATSPub(t)
	p := newNATSPub(t, testkit.NATSURL())
	const deadline = 10 * time.Second
	took, err := pubtest.PublishOne(p, pubtest.Message(outbox.Destination{Kind: outbox.KindNATS, Name: pubtest.RandomName("nostream.")}, "m", "t", "k", []byte("{}")), deadline)
	pubtest.WantTransient(t, "a subject without a stream", err, took, deadline)
	if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(pubtest.ErrString(err), "no JetStream stream") {
		t.Errorf("a subject without a stream: %v, want no responders said", err)
	}
	if _, err := pubtest.PublishOne(p, pubtest.Message(b.dest("orders"), "after", "t", "k", []byte("{}")), deadline); err != nil {
		t.Errorf("a stream's subject after the missing one: %v", err)
	}
}

// With the connection cut (through a proxy), Publish fails within its
// deadline, not refused, and is not ready; once the network heals nats.go
// reconnects and a Publish succeeds.
func TestNATSConnectionCut(t *testing.T) {
	t.Parallel()
	b := setupNATSPub(t)
	proxy, url := testkit.ProxyTo(t, testkit.NATSURL())
	p := newNATSPub(t, url)
	pubtest.ConnectionCut(t, proxy, p, b.dest("orders"), b.consume)
}

// Publish returns within its ctx when the network drops everything (a
// black hole), not refused.
func TestNATSBlackHoleReturnsWithinCtx(t *testing.T) {
	t.Parallel()
	b := setupNATSPub(t)
	proxy, url := testkit.ProxyTo(t, testkit.NATSURL())
	p := newNATSPub(t, url)
	if _, err := pubtest.PublishOne(p, pubtest.Message(b.dest("orders"), "before", "t", "k", []byte("{}")), 10*time.Second); err != nil {
		t.Fatalf("before the black hole: %v", err)
	}
	if err := proxy.BlackHole(); err != nil {
		t.Fatal(err)
	}
	const deadline = 2 * time.Second
	took, err := pubtest.PublishOne(p, pubtest.Message(b.dest("orders"), "during", "t", "k", []byte("{}")), deadline)
	pubtest.WantTransient(t, "publishing into a black hole", err, took, deadline)
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitForReport(t, 30*time.Second, func() (bool, string) {
		_, err := pubtest.PublishOne(p, pubtest.Message(b.dest("orders"), "after", "t", "k", []byte("{}")), deadline)
		return err == nil, "a Publish succeeds after the network heals (last: " + pubtest.ErrString(err) + ")"
	})
}

// What nats.go cannot send as it is (a header name it refuses, a value it
// would change) is refused by Check as unencodable, with the reason;
// Publish, given a header name nats.go refuses, refuses that message and
// publishes the one after it.
func TestNATSRefusesWhatItCannotEncode(t *testing.T) {
	t.Parallel()
	b := setupNATSPub(t)
	p := newNATSPub(t, testkit.NATSURL())
	withHeader := func(id, k, v string) outbox.Message {
		m := pubtest.Message(b.dest("orders"), id, "t", "k", []byte("{}"))
		m.Headers = append(m.Headers, outbox.Header{Key: k, Value: v})
		return m
	}
	for _, c := range []struct {
		m    outbox.Message
		want string
	}{
		{withHeader("space", "bad name", "v"), `header name "bad name"`},
		{withHeader("colon", "a:b", "v"), `header name "a:b"`},
		{withHeader("empty", "", "v"), `header name ""`},
		{withHeader("newline", "note", "two\nlines"), "header note"},
		{withHeader("trailing", "note", "v "), "header note"},
		{pubtest.Message(b.dest("orders"), "id ", "t", "k", nil), "header event_id"},
		{pubtest.Message(b.dest("orders"), "key", "t", "k\r\n", nil), "header key"},
	} {
		err := p.Check(c.m)
		if !errors.Is(err, outbox.ErrUnencodable) || !errors.Is(err, outbox.ErrRefused) || !strings.Contains(pubtest.ErrString(err), c.want) {
			t.Errorf("Check of %q: %v, want unencodable, saying %q", c.m.EventID, err, c.want)
		}
	}
	if err := p.Check(withHeader("fine", "Tenant-ID_2", "acme, déjà vu")); err != nil {
		t.Errorf("Check of a header NATS carries: %v", err)
	}
	pubtest.WantUnencodableThenNext(t, p, withHeader("space", "bad name", "v"), pubtest.Message(b.dest("orders"), "after", "t", "k", []byte("{}")))
	if got := b.consume(t, 1); got[0].Headers[outbox.EventIDHeader] != "after" {
		t.Errorf("read back %v", got[0].Headers)
	}
}
