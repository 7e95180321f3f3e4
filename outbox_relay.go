package inboxd

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/startstop"
)

// outboxRelay is the relay with the publishers it owns.
type outboxRelay struct {
	*outbox.Relay
	pubs map[string]outbox.Publisher
	log  zerolog.Logger
}

// newOutboxRelay builds the relay and its publishers (which connect only
// when they first publish).
func newOutboxRelay(cfg OutboxConfig, db *pgxpool.Pool, log zerolog.Logger, reg prometheus.Registerer) (*outboxRelay, error) {
	pubs, err := newPublishers(cfg, log)
	if err != nil {
		return nil, err
	}
	r, err := outbox.New(db, pubs, cfg.relayConfig(), log, reg)
	if err != nil {
		closePublishers(pubs, log)
		return nil, err
	}
	return &outboxRelay{Relay: r, pubs: pubs, log: log}, nil
}

// run runs the relay until ctx ends, then closes the publishers.
func (r *outboxRelay) run(ctx context.Context) error {
	defer closePublishers(r.pubs, r.log)
	return startstop.Run(ctx, r.Relay)
}

// newPublishers opens the publishers of cfg, one per kind of destination.
func newPublishers(cfg OutboxConfig, log zerolog.Logger) (map[string]outbox.Publisher, error) {
	pubs := map[string]outbox.Publisher{}
	var errs []error
	for i, pp := range cfg.Publishers {
		switch {
		case pp == nil:
			errs = append(errs, fmt.Errorf("inboxd: OutboxConfig.Publishers[%d] is nil", i))
			continue
		case pubs[pp.Kind()] != nil:
			errs = append(errs, fmt.Errorf("inboxd: OutboxConfig.Publishers lists two publishers of kind %s", pp.Kind()))
			continue
		}
		c, err := pp.OpenPublisher(log)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p, ok := c.(outbox.Publisher)
		if !ok {
			_ = c.Close()
			errs = append(errs, fmt.Errorf("inboxd: OutboxConfig.Publishers[%d] (%s) is not made by the Publisher of ingest/kafka, ingest/amqp or ingest/nats", i, pp.Kind()))
			continue
		}
		pubs[pp.Kind()] = p
	}
	if len(errs) > 0 {
		closePublishers(pubs, log)
		return nil, errors.Join(errs...)
	}
	return pubs, nil
}

func closePublishers(pubs map[string]outbox.Publisher, log zerolog.Logger) {
	for kind, p := range pubs {
		if err := p.Close(); err != nil {
			log.Warn().Err(err).Str("kind", kind).Msg("closing the outbox publisher failed")
		}
	}
}
