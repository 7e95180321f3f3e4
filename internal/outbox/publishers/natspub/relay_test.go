package natspub

import (
	"context"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/pubtest"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// The tests through the relay, on the real brokers: a key's order when one
// of its rows fails after it was sent (the rows after it are not published
// before it), and a row its broker's client cannot encode.

// The reproduction: a row whose PubAck fails (JetStream error
// 10060: its Nats-Expected-Stream header names another stream) and the
// two rows after it of the same key, in one batch. The two are not
// published while it is pending; it is refused (attempts counted) and goes
// dead, and then they are published, in their order.
func TestNATSFailedPubAckHoldsItsKey(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	nb := setupNATSPub(t)
	dest := "nats:" + nb.stream + ".orders"
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO outbox (destination, event_id, event_type, key, headers) VALUES
		  ($1, 'k0', 't', 'k', '{"Nats-Expected-Stream": "another-stream"}'),
		  ($1, 'k1', 't', 'k', '{}'),
		  ($1, 'k2', 't', 'k', '{}'),
		  ($1, 'o0', 't', 'o', '{}')`, dest); err != nil {
		t.Fatal(err)
	}
	cfg := pubtest.RelayConfig()
	cfg.MaxAttempts = 2
	pubtest.RunTunedRelay(t, db, cfg, map[string]outbox.Publisher{outbox.KindNATS: newNATSPub(t, testkit.NATSURL())}, pubtest.Logger(t), func(r *outbox.Relay) {
		_, hold := r.Backoffs()
		r.SetBackoffs(backoff.Exponential{Base: 100 * time.Millisecond, Max: 100 * time.Millisecond}, hold)
	})
	testkit.WaitFor(t, 20*time.Second, "k0 dead", func() bool { return pubtest.KeyHeldWhilePending(t, db, "k0", "k1", "k2") == "dead" })
	testkit.WaitFor(t, 20*time.Second, "k1, k2 and o0 published", func() bool { return pubtest.Count(t, db, "status = 'published'") == 3 })
	_, attempts, lastErr := pubtest.RowState(t, db, "k0")
	if attempts != 2 || lastErr == "" {
		t.Errorf("k0: %d attempts, last_error %q; want 2 and the server's reason", attempts, lastErr)
	}
	got := nb.consume(t, 3)
	var order []string
	for _, g := range got {
		if g.Key == "k" {
			order = append(order, g.Headers[outbox.EventIDHeader])
		}
	}
	if len(order) != 2 || order[0] != "k1" || order[1] != "k2" {
		t.Errorf("key k in the stream: %v, want [k1 k2]", order)
	}
}

// The reproduction: a third party's SQL writes a row whose message
// nats.go cannot encode (a header name with a space). It is a refusal of
// that row: its attempt is counted and it goes dead with the reason, its
// key moves on, and every other row of its destination is published.
func TestUnencodableRowIsRefusedNotAnOutage(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	nb := setupNATSPub(t)
	log := pubtest.Logger(t)
	np, err := New(Config{URL: testkit.NATSURL()}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = np.Close() })
	n := pubtest.PoisonRowIsRefused(t, db, "nats:"+nb.stream+".orders", outbox.KindNATS, np, log,
		pubtest.Poison{EventID: "poison-n", Headers: `{"bad name": "v"}`, Reason: "bad name"})
	if got := nb.messages(t); got != uint64(n) {
		t.Errorf("the stream holds %d messages, want %d", got, n)
	}
}
