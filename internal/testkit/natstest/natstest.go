// Package natstest gives a test a JetStream stream of its own on the NATS
// server the tests use (testkit.NATSURL), written once for the NATS
// source's tests, the outbox's NATS publisher's and the daemon's.
package natstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxd/inboxd/internal/natsurl"
	"github.com/inboxd/inboxd/internal/testkit"
)

// Stream is one test's stream: its name (subjects "<name>.>"), and the
// connection and JetStream context it was made with.
type Stream struct {
	Name string
	NC   *nats.Conn
	JS   jetstream.JetStream
}

// New connects to the tests' NATS server and creates a stream named
// prefix followed by random hex, in memory, adjusted by opts; the stream
// (with its consumers) is deleted and the connection closed when the test
// ends.
func New(t testing.TB, prefix string, opts ...func(*jetstream.StreamConfig)) *Stream {
	t.Helper()
	url := testkit.NATSURL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to NATS at %s (start it with nats-server -js): %v", natsurl.Redact(url), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	s := &Stream{Name: prefix + hex.EncodeToString(suffix[:]), NC: nc, JS: js}
	sc := jetstream.StreamConfig{Name: s.Name, Subjects: []string{s.Name + ".>"}, Storage: jetstream.MemoryStorage}
	for _, o := range opts {
		o(&sc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, sc); err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, s.Name); err != nil {
			t.Errorf("delete stream %s: %v", s.Name, err)
		}
		nc.Close()
	})
	return s
}
