package ingestcore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/ingest/amqp"
	"github.com/inboxd/inboxd/ingest/kafka"
	"github.com/inboxd/inboxd/ingest/nats"
	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/ingest/webhook"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/handoff"
	"github.com/inboxd/inboxd/internal/ingestcore"
)

// handOffStub is a hand-off that is never called: Open only hands it on.
type handOffStub struct{}

func (handOffStub) Reserve([]driver.NewRow) *driver.Reservation { return nil }
func (handOffStub) Deliver(context.Context, *driver.Reservation, []driver.NewRow, []driver.Reserved) {
}
func (handOffStub) Cancel(*driver.Reservation) {}

// everyKind is a source of each kind, none reaching its broker before Run.
func everyKind(pipe ingest.PipelineConfig, hooks []webhook.SourceConfig) []sourceapi.Source {
	return []sourceapi.Source{
		kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, Group: "g", PipelineConfig: pipe}),
		amqp.New(amqp.Config{URL: "amqp://127.0.0.1:1/", Queues: []string{"q"}, Pipeline: pipe}),
		nats.New(nats.Config{URL: "nats://127.0.0.1:1", Streams: []string{"s"}, Pipeline: pipe}),
		webhook.New(webhook.Config{Addr: "127.0.0.1:0", Sources: hooks, Pipeline: pipe}),
	}
}

// TestOpenGivesEverySourceTheHandOff: each kind's Open gives the writer
// the hand-off of source.Env (the engine's pool, there), and none when Env
// holds none or something else. It reaches no broker.
func TestOpenGivesEverySourceTheHandOff(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://127.0.0.1:1/none") // never connected: Open does not reach it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	hooks := []webhook.SourceConfig{{Name: "open", Verify: webhook.None, EventID: webhook.Field{Header: "X-Event-Id"},
		EventType: webhook.Field{Header: "X-Event-Type"}}}
	f := handOffStub{}
	for _, tc := range []struct {
		name string
		h    any
		want handoff.HandOff
	}{{"the engine's", f, f}, {"none", nil, nil}, {"another value", "not a hand-off", nil}} {
		for _, src := range everyKind(ingest.PipelineConfig{}, hooks) {
			r, err := src.Open(sourceapi.Env{DB: pool, Logger: zerolog.Nop(), HandOff: tc.h})
			if err != nil {
				t.Fatalf("%s: Open: %v", src.Kind(), err)
			}
			c, ok := r.(ingestcore.Opened).R.(interface{ Core() *ingestcore.Pipeline })
			if !ok {
				t.Fatalf("%s: opened a %T, not on the pipeline", src.Kind(), r.(ingestcore.Opened).R)
			}
			if got := c.Core().Writer.(ingestcore.PGWriter).HandOff; got != tc.want {
				t.Errorf("%s, %s hand-off: the writer has %v", src.Kind(), tc.name, got)
			}
		}
	}
}

// TestEachKindRemapsItsOwnRows: the remap rules reached through the
// sources (ingestcore.RemappersOf) map each kind's rejected row by that
// kind's rules, whatever the other kinds would do with it. Each row is
// rejected for want of a type; the current settings give one in the
// header "kind" (the brokers) or the source's value (the webhook source),
// and each kind's row carries what only its own rule reads.
func TestEachKindRemapsItsOwnRows(t *testing.T) {
	t.Parallel()
	fixed := ingest.PipelineConfig{Mapping: ingest.MapOptions{EventTypeHeaders: []string{"kind"}}}
	hooks := []webhook.SourceConfig{{Name: "hooks", Verify: webhook.None, EventID: webhook.Field{Header: "X-Event-Id"},
		EventType: webhook.Field{Value: "hook.fired"}}}
	rules := ingestcore.RemappersOf(everyKind(fixed, hooks)...)
	for _, kind := range []string{ingest.SourceKafka, ingest.SourceAMQP, ingest.SourceNATS, ingest.SourceWebhook} {
		if rules[kind] == nil {
			t.Fatalf("no remap rule for %s", kind)
		}
	}
	for _, tc := range []struct {
		kind string
		row  ingestcore.Stored
		// wantID and wantType are what the kind's own rule gives.
		wantID, wantType string
	}{
		// Kafka: the id from the header event_id, the type from "kind".
		{ingest.SourceKafka, ingestcore.Stored{Source: "orders", EventID: ingestcore.KafkaPositionID("orders", 1, 5),
			Partition: 1, Offset: 5, Payload: []byte("k"),
			Headers: []ingestcore.Header{{Key: "event_id", Value: []byte("k-1")}, {Key: "kind", Value: []byte("order.created")}}},
			"k-1", "order.created"},
		// RabbitMQ: the id from the message_id property kept among the
		// headers (no event_id header: Kafka's rule would reject it).
		{ingest.SourceAMQP, ingestcore.Stored{Source: "q", EventID: "q/sha256/" + strings.Repeat("ab", 32), Payload: []byte("a"),
			Headers: []ingestcore.Header{{Key: "amqp-message-id", Value: []byte("m-1")}, {Key: "kind", Value: []byte("order.paid")}}},
			"m-1", "order.paid"},
		// NATS: the id from Nats-Msg-Id, the type from "kind" (else the
		// subject).
		{ingest.SourceNATS, ingestcore.Stored{Source: "s", EventID: "s/7@2025-01-02T03:04:05Z", Payload: []byte("n"),
			Headers: []ingestcore.Header{{Key: "Nats-Msg-Id", Value: []byte("n-1")}, {Key: "kind", Value: []byte("order.sent")},
				{Key: "nats-subject", Value: []byte("s.orders")}}},
			"n-1", "order.sent"},
		// Webhooks: the source's own rules (the type is its value, not the
		// "kind" header a broker's rule would take).
		{ingest.SourceWebhook, ingestcore.Stored{Source: "hooks", EventID: "rejected/sha256:" + strings.Repeat("cd", 32), Payload: []byte("{}"),
			Headers: []ingestcore.Header{{Key: "x-event-id", Value: []byte("h-1")}, {Key: "kind", Value: []byte("not.this")}}},
			"h-1", "hook.fired"},
	} {
		for other, r := range rules {
			if owns := r.Owns(tc.row); owns != (other == tc.kind) && other != ingest.SourceKafka {
				t.Errorf("%s row: the %s rule owns it: %v", tc.kind, other, owns)
			}
		}
		got := rules.Remap(tc.row)
		if got.Status != ingestcore.StatusReceived || got.EventID != tc.wantID || got.EventType != tc.wantType {
			t.Errorf("%s row mapped again: %s %q %q (%s); want received %q %q", tc.kind, got.Status, got.EventID, got.EventType,
				got.LastError, tc.wantID, tc.wantType)
		}
		if tc.kind != ingest.SourceKafka {
			if k := rules[ingest.SourceKafka].Remap(tc.row); k.Status == ingestcore.StatusReceived && k.EventID == tc.wantID && k.EventType == tc.wantType {
				t.Errorf("%s row: Kafka's rule maps it the same (the case proves nothing)", tc.kind)
			}
		}
	}
	// Without a sources file, a webhook row stays rejected and says why.
	bare := ingestcore.RemappersOf(everyKind(fixed, nil)...)
	row := ingestcore.Stored{Source: "hooks", EventID: "rejected/sha256:" + strings.Repeat("cd", 32)}
	if got := bare.Remap(row); got.Status != ingestcore.StatusRejected || !strings.Contains(got.LastError, "INBOXD_WEBHOOK_SOURCES is not set") {
		t.Errorf("a webhook row without the sources file: %+v", got)
	}
}
