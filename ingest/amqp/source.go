package amqp

import (
	"github.com/inboxd/inboxd/ingest"
	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/amqpmap"
)

// New returns the RabbitMQ source of cfg, for
// inboxd.Config.Sources. The Inboxd hands it its workers' hand-off.
func New(cfg Config) sourceapi.Source { return amqpDef{cfg} }

type amqpDef struct{ cfg Config }

func (amqpDef) Kind() string { return ingest.SourceAMQP }

func (s amqpDef) Open(env sourceapi.Env) (sourceapi.Running, error) {
	c := s.cfg
	c.handOff = ingestcore.HandOffOf(env)
	r, err := openAMQP(c, env.DB, env.Logger, env.Registerer)
	if err != nil {
		return nil, err
	}
	return ingestcore.Opened{R: r, Label: "ingest (RabbitMQ)",
		Unready: "ingest not ready: source_kind=amqp (cannot persist to the database, not connected to RabbitMQ, or its connection is blocked)"}, nil
}

// RemapRule is the RabbitMQ source's rule for its rejected rows
// (ingestcore.Remapper), with its mapping settings.
func (s amqpDef) RemapRule() ingestcore.RemapRule { return amqpmap.Rule{Opts: s.cfg.Pipeline.Mapping} }
