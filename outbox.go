package inboxd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/outbox"
)

// OutboxMessage is one message for Emit to write to the outbox table, to
// be published by the relay of a process running with Config.Outbox (the
// daemon with INBOXD_OUTBOX=true).
type OutboxMessage struct {
	// Destination is kafka:<topic>, amqp:<exchange>/<routing key>
	// (amqp:/<queue> for the default exchange) or nats:<subject>.
	Destination string
	// EventType is sent as the event_type header (and the AMQP type
	// property). Required.
	EventType string
	// EventID is sent as the event_id header (the AMQP message_id, the NATS
	// Nats-Msg-Id), the same on every re-publication, so that a downstream
	// inbox deduplicates. Empty: the database makes a UUID.
	EventID string
	// Key orders the messages of a destination: those with one key are
	// published in the order they were written (see docs/outbox.md). It is
	// the Kafka message key, and the "key" header on RabbitMQ and NATS.
	// Empty: no key, no order.
	Key string
	// Headers are more headers to send. event_id and event_type are set
	// from the fields above; traceparent is set from ctx's span when ctx
	// has one and Headers has none.
	Headers map[string]string
	// Payload is the message body.
	Payload []byte
}

// Emit writes msgs to the outbox in tx, the caller's transaction, in their
// order, and returns their event ids. It writes none if any message is
// one the relay could not publish, and says why, every reason of every
// message on a line of its own: no event type, a header without a name or
// named event_id or event_type, a destination that does not parse, or a
// message its destination's broker cannot carry (a NATS header name with
// a space, an AMQP message_id over 255 bytes: the rules of
// docs/outbox.md#what-a-broker-cannot-carry). They are published once tx commits,
// and never if it rolls back. From a transactional handler
// (handlers.TxHandler), pass the handler's transaction: consuming the
// event, the service's writes and the events it emits then commit
// together, or not at all.
//
// Plain SQL does the same from any language:
//
//	INSERT INTO outbox (destination, event_type, key, payload)
//	VALUES ('kafka:orders', 'order.shipped', 'order-7', '{"id": 7}');
func Emit(ctx context.Context, tx pgx.Tx, msgs ...OutboxMessage) ([]string, error) {
	if tx == nil {
		return nil, errors.New("inboxd: Emit needs the caller's transaction")
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	var traceparent string
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		traceparent = fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	}
	rows := make([]driver.OutboxMessage, len(msgs))
	var errs []error
	for i, m := range msgs {
		if m.EventType == "" {
			errs = append(errs, fmt.Errorf("inboxd: outbox message %d: no event type", i))
		}
		hs := make(map[string]string, len(m.Headers)+1)
		for k, v := range m.Headers {
			switch k {
			case "":
				errs = append(errs, fmt.Errorf("inboxd: outbox message %d: a header without a name", i))
			case outbox.EventIDHeader, outbox.EventTypeHeader:
				errs = append(errs, fmt.Errorf("inboxd: outbox message %d: header %q is set from the message's field, not Headers", i, k))
			}
			hs[k] = v
		}
		if _, ok := hs[outbox.TraceParentHeader]; !ok && traceparent != "" {
			hs[outbox.TraceParentHeader] = traceparent
		}
		rows[i] = driver.OutboxMessage{
			Destination: m.Destination, EventID: m.EventID, EventType: m.EventType, Key: m.Key,
			Headers: hs, Payload: m.Payload,
		}
		for _, err := range outbox.Validate(rows[i]) {
			errs = append(errs, fmt.Errorf("inboxd: outbox message %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	written, err := driver.InsertOutbox(ctx, tx, rows)
	if err != nil {
		return nil, fmt.Errorf("inboxd: %w", err)
	}
	ids := make([]string, len(written))
	for i, w := range written {
		ids[i] = w.EventID
	}
	return ids, nil
}

// OutboxConfig configures the outbox relay that Run runs beside the
// workers. Zero fields take the defaults of docs/outbox.md.
type OutboxConfig struct {
	// BatchSize caps the rows read and published at once (default 500).
	BatchSize int
	// PollInterval is how long the relay waits, having found nothing,
	// before it reads again (default 50ms).
	PollInterval time.Duration
	// Lease is a shard lease's length, renewed every third of it (default
	// 15s): a relay that stops has its shards taken over within it.
	Lease time.Duration
	// PublishTimeout bounds publishing one batch (default 5s, at most
	// Lease/3).
	PublishTimeout time.Duration
	// MaxAttempts is how many broker refusals a row takes before it goes
	// dead (default 10); a broker that cannot be reached costs none.
	MaxAttempts int
	// Retention is how long published rows are kept (default 1h);
	// negative keeps them.
	Retention time.Duration

	// Publishers are the brokers published to, one per kind of destination
	// (the Publisher of ingest/kafka, ingest/amqp or ingest/nats): rows
	// for a kind without one wait, pending. The root package links no
	// broker client: the program links those of the publishers it lists.
	Publishers []source.Publisher
}

func (c OutboxConfig) relayConfig() outbox.Config {
	return outbox.Config{
		BatchSize: c.BatchSize, PollInterval: c.PollInterval, Lease: c.Lease,
		PublishTimeout: c.PublishTimeout, MaxAttempts: c.MaxAttempts, Retention: c.Retention,
	}
}
