package ingest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/handoff"
)

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
	pipe := PipelineConfig{}
	sources := []sourceapi.Source{
		NewKafkaSource(Config{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, Group: "g"}),
		NewAMQPSource(AMQPConfig{URL: "amqp://127.0.0.1:1/", Queues: []string{"q"}, Pipeline: pipe}),
		NewNATSSource(NATSConfig{URL: "nats://127.0.0.1:1", Streams: []string{"s"}, Pipeline: pipe}),
		NewWebhookSource(WebhookConfig{Addr: "127.0.0.1:0", Sources: testWebhookSources(), Pipeline: pipe}),
	}
	f := &fakeHandOff{}
	for _, tc := range []struct {
		name string
		h    any
		want handoff.HandOff
	}{{"the engine's", f, f}, {"none", nil, nil}, {"another value", "not a hand-off", nil}} {
		for _, src := range sources {
			r, err := src.Open(sourceapi.Env{DB: pool, Logger: zerolog.Nop(), HandOff: tc.h})
			if err != nil {
				t.Fatalf("%s: Open: %v", src.Kind(), err)
			}
			var p *pipeline
			switch s := r.(openedSource).r.(type) {
			case *kafkaConsumer:
				p = s.pipeline
			case *amqpSource:
				p = s.pipeline
			case *natsSource:
				p = s.pipeline
			case *webhookSource:
				p = s.pipeline
			default:
				t.Fatalf("%s: opened a %T", src.Kind(), s)
			}
			if got := p.writer.(pgWriter).handOff; got != tc.want {
				t.Errorf("%s, %s hand-off: the writer has %v", src.Kind(), tc.name, got)
			}
		}
	}
}
