package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
	"github.com/inboxd/inboxd/internal/testkit/natstest"
)

// NATS JetStream → inbox → HTTP sink through the real binary:
// INBOXD_NATS_URL and INBOXD_NATS_STREAMS run the NATS source; every
// unique event is delivered once and ends processed, a duplicate carried
// by its event_id header is absorbed, an oversize message is one rejected
// row, and the durable consumer ends with nothing pending.
func TestNATSToSinkEndToEnd(t *testing.T) {
	t.Parallel()
	url, js, stream := natsStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

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
		if got := s.ByKey(key); len(got) != 1 || got[0].Source != stream {
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

// natsStream creates a stream of the test's own (subjects "<stream>.>") on
// the real server, deleted with its consumers when the test ends.
func natsStream(t *testing.T) (url string, js jetstream.JetStream, stream string) {
	t.Helper()
	s := natstest.New(t, "inboxd_it_")
	return testkit.NATSURL(), s.JS, s.Name
}

// Three SIGKILLs of the daemon while a stream flows, with 10 % duplicates
// (the id in a header, which JetStream cannot deduplicate) and oversize
// messages: after the last restart every unique event is in the inbox
// once and processed, every oversize message is one rejected row, and the
// durable consumer (made beforehand with a short AckWait, so that what the
// killed daemons held comes back soon) ends with nothing pending.
func TestNATSSIGKILLStormLosesNothing(t *testing.T) {
	t.Parallel()
	url, js, stream := natsStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "inboxd",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	db := pgtest.New(t)
	s := newSink(t)
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: http\n    url: "+s.URL+"\n")
	env := []string{
		"INBOXD_DATABASE_URL=" + db.URL,
		"INBOXD_NATS_URL=" + url,
		"INBOXD_NATS_STREAMS=" + stream,
		"INBOXD_MAX_PAYLOAD=1024",
		"INBOXD_ROUTES=" + routes,
		"INBOXD_LEASE=2s",
		"INBOXD_BACKOFF_BASE=50ms",
		"INBOXD_BACKOFF_MAX=200ms",
	}
	d := startDaemon(t, env...)

	const n, malformedEvery = 3000, 100
	var published atomic.Int64
	done := make(chan error, 1)
	go func() {
		// About 500 events/s for 6s: the kills and restarts land in it.
		pace := time.NewTicker(100 * time.Millisecond)
		defer pace.Stop()
		for start := 0; start < n; start += 50 {
			<-pace.C
			for i := start; i < start+50; i++ {
				m := nats.NewMsg(stream + ".orders")
				m.Header.Set("event_id", fmt.Sprintf("o-%05d", i))
				m.Header.Set("event_type", "order.created")
				m.Data = []byte(`{}`)
				if i%malformedEvery == 0 {
					m.Data = []byte(strings.Repeat("B", 2000))
				}
				if _, err := js.PublishMsg(ctx, m); err != nil {
					done <- err
					return
				}
				if i%10 == 5 { // a duplicate
					if _, err := js.PublishMsg(ctx, m); err != nil {
						done <- err
						return
					}
				}
			}
			published.Add(50)
		}
		done <- nil
	}()

	for k := 1; k <= 3; k++ {
		want := int64(k) * n / 5
		waitFor(t, 30*time.Second, fmt.Sprintf("stream under way before kill %d", k), func() bool {
			return published.Load() >= want && countStatus(t, db, "processed") > 0
		})
		d.Kill()
		if published.Load() == n {
			t.Fatalf("the publisher had finished before kill %d: not a mid-stream kill", k)
		}
		d = startDaemon(t, env...)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	const malformed = n / malformedEvery
	waitFor(t, 60*time.Second, "every event processed after the restarts", func() bool {
		return countStatus(t, db, "processed") == n-malformed
	})
	if got := countStatus(t, db, "rejected"); got != malformed {
		t.Errorf("rejected rows = %d, want %d", got, malformed)
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Fatalf("inbox has %d rows, want %d", rows, n)
	}
	waitFor(t, 30*time.Second, "consumer drained", func() bool {
		c, err := js.Consumer(ctx, stream, "inboxd")
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}
