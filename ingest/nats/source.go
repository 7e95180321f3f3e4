package nats

import (
	"github.com/inboxd/inboxd/ingest"
	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/natsmap"
)

// New returns the NATS JetStream source of cfg, for
// inboxd.Config.Sources. The Inboxd hands it its workers' hand-off.
func New(cfg Config) sourceapi.Source { return natsDef{cfg} }

type natsDef struct{ cfg Config }

func (natsDef) Kind() string { return ingest.SourceNATS }

func (s natsDef) Open(env sourceapi.Env) (sourceapi.Running, error) {
	c := s.cfg
	c.handOff = ingestcore.HandOffOf(env)
	r, err := openNATS(c, env.DB, env.Logger, env.Registerer)
	if err != nil {
		return nil, err
	}
	return ingestcore.Opened{R: r, Label: "ingest (NATS)",
		Unready: "ingest not ready: source_kind=nats (cannot persist to the database, or not connected to NATS with every stream's consumer bound)"}, nil
}

// RemapRule is the NATS source's rule for its rejected rows
// (ingestcore.Remapper), with its mapping settings.
func (s natsDef) RemapRule() ingestcore.RemapRule { return natsmap.Rule{Opts: s.cfg.Pipeline.Mapping} }
