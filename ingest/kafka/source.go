package kafka

import (
	"github.com/inboxd/inboxd/ingest"
	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
)

// New returns the Kafka source of cfg (a kafka-go consumer
// group), for inboxd.Config.Sources. The Inboxd hands it its workers' hand-off.
func New(cfg Config) sourceapi.Source { return kafkaDef{cfg} }

type kafkaDef struct{ cfg Config }

func (kafkaDef) Kind() string { return ingest.SourceKafka }

func (s kafkaDef) Open(env sourceapi.Env) (sourceapi.Running, error) {
	c := s.cfg
	c.handOff = ingestcore.HandOffOf(env)
	r, err := openKafka(c, env.DB, env.Logger, env.Registerer)
	if err != nil {
		return nil, err
	}
	return ingestcore.Opened{R: r, HealthyFunc: r.Healthy, Label: "ingest",
		Unready: "ingest not ready: source_kind=kafka (cannot persist to the database or not consuming yet)"}, nil
}

// RemapRule is the Kafka source's rule for its rejected rows
// (ingestcore.Remapper), with its mapping settings.
func (s kafkaDef) RemapRule() ingestcore.RemapRule { return kafkamap.Rule{Opts: s.cfg.Mapping} }
