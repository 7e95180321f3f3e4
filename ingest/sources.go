package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/handoff"
)

// NewKafkaSource returns the Kafka source of cfg (a kafka-go consumer
// group), for inboxd.Config.Sources. The Inboxd hands it its workers' hand-off.
func NewKafkaSource(cfg Config) sourceapi.Source { return kafkaDef{cfg} }

// NewAMQPSource returns the RabbitMQ source of cfg, for
// inboxd.Config.Sources. The Inboxd hands it its workers' hand-off.
func NewAMQPSource(cfg AMQPConfig) sourceapi.Source { return amqpDef{cfg} }

// NewNATSSource returns the NATS JetStream source of cfg, for
// inboxd.Config.Sources. The Inboxd hands it its workers' hand-off.
func NewNATSSource(cfg NATSConfig) sourceapi.Source { return natsDef{cfg} }

// NewWebhookSource returns the webhook source of cfg (signed HTTP requests
// on a listener of its own), for inboxd.Config.Sources.
// The Inboxd hands it its workers' hand-off.
func NewWebhookSource(cfg WebhookConfig) sourceapi.Source { return webhookDef{cfg} }

type (
	kafkaDef   struct{ cfg Config }
	amqpDef    struct{ cfg AMQPConfig }
	natsDef    struct{ cfg NATSConfig }
	webhookDef struct{ cfg WebhookConfig }
)

func (kafkaDef) Kind() string   { return SourceKafka }
func (amqpDef) Kind() string    { return SourceAMQP }
func (natsDef) Kind() string    { return SourceNATS }
func (webhookDef) Kind() string { return SourceWebhook }

func (s kafkaDef) Open(env sourceapi.Env) (sourceapi.Running, error) {
	c := s.cfg
	c.handOff = handOffOf(env)
	r, err := openKafka(c, env.DB, env.Logger, env.Registerer)
	if err != nil {
		return nil, err
	}
	return openedSource{r: r, healthy: r.Healthy, label: "ingest",
		unready: "ingest not ready: source_kind=kafka (cannot persist to the database or not consuming yet)"}, nil
}

func (s amqpDef) Open(env sourceapi.Env) (sourceapi.Running, error) {
	c := s.cfg
	c.Pipeline.handOff = handOffOf(env)
	r, err := openAMQP(c, env.DB, env.Logger, env.Registerer)
	if err != nil {
		return nil, err
	}
	return openedSource{r: r, label: "ingest (RabbitMQ)",
		unready: "ingest not ready: source_kind=amqp (cannot persist to the database, not connected to RabbitMQ, or its connection is blocked)"}, nil
}

func (s natsDef) Open(env sourceapi.Env) (sourceapi.Running, error) {
	c := s.cfg
	c.Pipeline.handOff = handOffOf(env)
	r, err := openNATS(c, env.DB, env.Logger, env.Registerer)
	if err != nil {
		return nil, err
	}
	return openedSource{r: r, label: "ingest (NATS)",
		unready: "ingest not ready: source_kind=nats (cannot persist to the database, or not connected to NATS with every stream's consumer bound)"}, nil
}

func (s webhookDef) Open(env sourceapi.Env) (sourceapi.Running, error) {
	c := s.cfg
	c.Pipeline.handOff = handOffOf(env)
	r, err := openWebhook(c, env.DB, env.Logger, env.Registerer)
	if err != nil {
		return nil, err
	}
	return openedSource{r: r, label: "ingest (webhooks)",
		unready: "ingest not ready: source_kind=webhook (cannot persist to the database, or not listening)"}, nil
}

// runner is what every source type answers.
type runner interface {
	Run(ctx context.Context) error
	Ready() bool
	Reachable() bool
	LastProgress() time.Time
}

// openedSource is a source opened: the source.Running of every kind, with its
// errors' label, its readiness probe's answer and its liveness check.
type openedSource struct {
	r       runner
	healthy func() error // nil: always healthy
	label   string
	unready string
}

func (r openedSource) Run(ctx context.Context) error {
	if err := r.r.Run(ctx); err != nil {
		return fmt.Errorf("%s: %w", r.label, err)
	}
	return nil
}

func (r openedSource) Ready() error {
	if r.r.Ready() {
		return nil
	}
	return errors.New(r.unready)
}

func (r openedSource) Reachable() bool         { return r.r.Reachable() }
func (r openedSource) LastProgress() time.Time { return r.r.LastProgress() }

func (r openedSource) Healthy() error {
	if r.healthy == nil {
		return nil
	}
	return r.healthy()
}

// Addr is the address the source listens on, for a webhook source once it
// listens ("" before, and for the other kinds): reached by a type
// assertion on the source.Running, as the tests that post to it do.
func (r openedSource) Addr() string {
	if a, ok := r.r.(interface{ Addr() string }); ok {
		return a.Addr()
	}
	return ""
}

// handOffOf is env's hand-off, when it is the engine's (nil otherwise).
func handOffOf(env sourceapi.Env) handoff.HandOff {
	h, _ := env.HandOff.(handoff.HandOff)
	return h
}
