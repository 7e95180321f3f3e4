package inboxd

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/outbox"
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
	return r.Run(ctx)
}

// newPublishers makes a publisher per kind of broker configured.
func newPublishers(cfg OutboxConfig, log zerolog.Logger) (map[string]outbox.Publisher, error) {
	pubs := map[string]outbox.Publisher{}
	var errs []error
	if k := cfg.Kafka; k != nil {
		p, err := outbox.NewKafka(outbox.KafkaConfig{Brokers: k.Brokers, ClientID: k.ClientID, TLS: brokers.TLS(k.TLS), SASL: brokers.SASL(k.SASL),
			Compression: cfg.KafkaCompression}, log)
		if err != nil {
			errs = append(errs, err)
		} else {
			pubs[outbox.KindKafka] = p
		}
	}
	if a := cfg.AMQP; a != nil {
		p, err := outbox.NewAMQP(outbox.AMQPConfig{URL: a.URL, TLS: brokers.TLS(a.TLS)}, log)
		if err != nil {
			errs = append(errs, err)
		} else {
			pubs[outbox.KindAMQP] = p
		}
	}
	if n := cfg.NATS; n != nil {
		p, err := outbox.NewNATS(outbox.NATSConfig{URL: n.URL, CredsFile: n.CredsFile, TLS: brokers.TLS(n.TLS)}, log)
		if err != nil {
			errs = append(errs, err)
		} else {
			pubs[outbox.KindNATS] = p
		}
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
