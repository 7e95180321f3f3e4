package outbox

import (
	"io"

	"github.com/rs/zerolog"
)

// Opening is one broker's publisher before it is opened: what the Publisher
// of ingest/kafka, ingest/amqp and ingest/nats returns, an element of
// inboxd.OutboxConfig.Publishers (it is a source.Publisher). The root
// package opens it and runs the relay with what it opened.
type Opening struct {
	// Of is the kind of destination it publishes to: KindKafka, KindAMQP
	// or KindNATS.
	Of string
	// Open validates the settings and builds the publisher, logging to
	// log, without connecting.
	Open func(log zerolog.Logger) (Publisher, error)
}

// Kind is Of.
func (o Opening) Kind() string { return o.Of }

// OpenPublisher is Open, its publisher as an io.Closer (nil on an error).
func (o Opening) OpenPublisher(log zerolog.Logger) (io.Closer, error) {
	p, err := o.Open(log)
	if err != nil {
		return nil, err
	}
	return p, nil
}
