package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxd/inboxd/migrations/pgtest"
)

// NATS JetStream → inbox → HTTP sink through the real binary:
// INBOXD_NATS_URL and INBOXD_NATS_STREAMS run the NATS source; every
// unique event is delivered once and ends processed, a duplicate carried
// by its event_id header is absorbed, an oversize message is one rejected
// row, and the durable consumer ends with nothing pending.
func TestNATSToSinkEndToEnd(t *testing.T) {
	t.Parallel()
	url := os.Getenv("INBOXD_TEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to NATS (start it with nats-server -js): %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	stream := "inboxd_it_" + hex.EncodeToString(suffix[:])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })

	db := pgtest.New(t)
	s := newSink(t)
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: http\n    url: "+s.URL+"\n")
	startDaemon(t,
		"INBOXD_DATABASE_URL="+db.URL,
		"INBOXD_NATS_URL="+url,
		"INBOXD_NATS_STREAMS="+stream,
		"INBOXD_MAX_PAYLOAD=1024",
		"INBOXD_ROUTES="+routes,
		"INBOXD_LEASE=2s",
		"INBOXD_BACKOFF_BASE=50ms",
		"INBOXD_BACKOFF_MAX=200ms",
	)

	publish := func(id, body string) {
		t.Helper()
		m := nats.NewMsg(stream + ".orders")
		m.Header.Set("event_id", id)
		m.Header.Set("event_type", "order.created")
		m.Data = []byte(body)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	const n = 100
	for i := range n {
		publish(fmt.Sprintf("o-%03d", i), `{}`)
	}
	publish("o-007", `{}`)
	publish("o-big", strings.Repeat("B", 2000))

	waitFor(t, 30*time.Second, "all events processed", func() bool { return countStatus(t, db, "processed") == n })
	if got := countStatus(t, db, "rejected"); got != 1 {
		t.Errorf("rejected rows = %d, want 1", got)
	}
	for i := range n {
		key := fmt.Sprintf("%s/o-%03d", stream, i)
		if got := s.byKey(key); len(got) != 1 || got[0].Source != stream {
			t.Fatalf("%s delivered %d times: %+v", key, len(got), got)
		}
	}
	waitFor(t, 10*time.Second, "consumer drained", func() bool {
		c, err := js.Consumer(ctx, stream, "inboxd")
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}
