package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// The README's quick start runs this demo (`make demo`, on Kafka; `make demo
// SOURCE=rabbitmq` and `SOURCE=nats` on the local servers, which CI has): it
// must keep working on each source, and leave no queue or stream behind.
func TestDemo(t *testing.T) {
	amqpURL := envOr("INBOXD_DEMO_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	natsURL := envOr("INBOXD_DEMO_NATS_URL", "nats://127.0.0.1:4222")
	for _, c := range []struct {
		source    string
		malformed string // the malformed message's last_error, in the output
		gone      func(t *testing.T, out string)
	}{
		{source: "kafka", malformed: "missing event id"},
		{source: "rabbitmq", malformed: "missing event id", gone: func(t *testing.T, out string) {
			conn, err := amqp.Dial(amqpURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			queue := created(t, out, `queue "([^"]+)"`)
			var aerr *amqp.Error
			if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
				t.Errorf("queue %s after the demo: %v, want NOT_FOUND", queue, err)
			}
		}},
		{source: "nats", malformed: "invalid event id in header event_id", gone: func(t *testing.T, out string) {
			nc, err := nats.Connect(natsURL)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			stream := created(t, out, `stream "([^"]+)"`)
			if _, err := js.Stream(context.Background(), stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("stream %s after the demo: %v, want not found", stream, err)
			}
		}},
	} {
		t.Run(c.source, func(t *testing.T) {
			switch c.source {
			case "rabbitmq":
				conn, err := amqp.Dial(amqpURL)
				if err != nil {
					testkit.Unavailable(t, "no RabbitMQ (rabbitmq-server -detached): "+err.Error())
				}
				_ = conn.Close()
			case "nats":
				nc, err := nats.Connect(natsURL)
				if err != nil {
					testkit.Unavailable(t, "no NATS (nats-server -js): "+err.Error())
				}
				nc.Close()
			}
			name := demoDatabase(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out bytes.Buffer
			if err := run(ctx, []string{"--source", c.source, "--events", "600", "--database", name}, &out); err != nil {
				t.Fatalf("demo failed: %v\n%s", err, out.String())
			}
			for _, want := range []string{
				"duplicates absorbed        60",
				"sink deliveries           600  for 600 distinct Idempotency-Keys",
				"http 422 Unprocessable Entity",
				c.malformed,
				"all as expected",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("demo output lacks %q:\n%s", want, out.String())
				}
			}
			if c.gone != nil {
				c.gone(t, out.String())
			}
		})
	}
}

// demoDatabase is a database name of the test's own for --database, dropped
// when the test ends.
func demoDatabase(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "inboxd_demo_test_" + hex.EncodeToString(b)
	t.Setenv("INBOXD_DEMO_DATABASE_URL", pgtest.AdminURL())
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, pgtest.AdminURL())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	return name
}

// created is the name the demo's output gives to what it created (pattern's
// first group).
func created(t *testing.T, out, pattern string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output names no %s:\n%s", pattern, out)
	}
	return m[1]
}
