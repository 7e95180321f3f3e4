package webhook

import (
	"github.com/inboxd/inboxd/ingest"
	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/ingestcore"
)

// New returns the webhook source of cfg (signed HTTP requests
// on a listener of its own), for inboxd.Config.Sources.
// The Inboxd hands it its workers' hand-off.
func New(cfg Config) sourceapi.Source { return webhookDef{cfg} }

type webhookDef struct{ cfg Config }

func (webhookDef) Kind() string { return ingest.SourceWebhook }

func (s webhookDef) Open(env sourceapi.Env) (sourceapi.Running, error) {
	c := s.cfg
	c.handOff = ingestcore.HandOffOf(env)
	r, err := openWebhook(c, env.DB, env.Logger, env.Registerer)
	if err != nil {
		return nil, err
	}
	return ingestcore.Opened{R: r, Label: "ingest (webhooks)",
		Unready: "ingest not ready: source_kind=webhook (cannot persist to the database, or not listening)"}, nil
}

// RemapRule is the webhook sources' rule for their rejected rows
// (ingestcore.Remapper): each by the rules of its source in cfg.Sources
// (nil: no sources file), over the mapping settings.
func (s webhookDef) RemapRule() ingestcore.RemapRule {
	return remapRule{sources: s.cfg.Sources, opts: s.cfg.Pipeline.Mapping}
}

// CheckSource is sc with its defaults applied and what is wrong with it,
// one line each: the rules a webhook source is held to, for the reader of
// the webhook sources file (internal/opfiles/webhookfile), which reaches
// them through the source as the requeue reaches the remap rule.
func (webhookDef) CheckSource(sc SourceConfig) (SourceConfig, []string) {
	sc = sc.withDefaults()
	return sc, sc.problems()
}
