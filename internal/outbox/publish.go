package outbox

import (
	"context"
	"errors"
	"fmt"
)

// The headers every published message carries, the names inboxd's own
// ingest reads by default, so that a downstream inbox deduplicates it.
const (
	// EventIDHeader holds the row's event_id.
	EventIDHeader = "event_id"
	// EventTypeHeader holds the row's event_type.
	EventTypeHeader = "event_type"
	// TraceParentHeader holds the W3C trace context of the writer's span,
	// when it had one.
	TraceParentHeader = "traceparent"
	// KeyHeader holds the key on RabbitMQ and NATS (Kafka has a key of its
	// own): the header inboxd's ingest reads the key from.
	KeyHeader = "key"
)

// Header is one message header.
type Header struct {
	Key   string
	Value string
}

// Message is one outbox row on its way to a broker.
type Message struct {
	// ID is the row's id.
	ID int64
	// Destination is where it goes.
	Destination Destination
	// EventID and EventType are the row's, also among Headers.
	EventID   string
	EventType string
	// Key is the ordering key; empty: none.
	Key string
	// Headers are the row's headers, then EventIDHeader and
	// EventTypeHeader, sorted by name: what the publisher sends.
	Headers []Header
	// Payload is the message body.
	Payload []byte
}

// ErrRefused is wrapped by the errors that are a broker's verdict on one
// message (too large, unroutable, refused by the server): the row's attempt
// is counted, and after the attempts it goes dead. Any other error means
// the destination could not be reached or did not answer in time: the
// destination is held back and retried, and its rows lose no attempt.
var ErrRefused = errors.New("refused by the broker")

// Refused returns an error wrapping ErrRefused with the reason.
func Refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// ErrUnencodable is wrapped, beside ErrRefused, by the refusals of a
// message its broker's client cannot encode as it is (a header name NATS
// does not allow, an AMQP property over a shortstr's 255 bytes): it would
// be refused every time, so the row goes dead at its first attempt, and
// its key's later rows move on.
var ErrUnencodable = errors.New("cannot be encoded for its broker")

// Unencodable returns an error that is both ErrRefused and ErrUnencodable
// (errors.Is), with the reason.
func Unencodable(format string, args ...any) error {
	return unencodable(fmt.Sprintf(format, args...))
}

// unencodable is the error of Unencodable, its reason.
type unencodable string

func (e unencodable) Error() string { return ErrUnencodable.Error() + ": " + string(e) }

// Is reports whether target is ErrRefused or ErrUnencodable.
func (e unencodable) Is(target error) bool { return target == ErrRefused || target == ErrUnencodable }

// Publisher sends messages to one kind of broker.
type Publisher interface {
	// Publish sends msgs, all of the publisher's kind, in their order, and
	// waits for the broker's acknowledgement of each (Kafka acks=all,
	// RabbitMQ publisher confirms with mandatory, JetStream's PubAck). It
	// returns one error per message, in msgs' order: nil once the broker
	// acknowledged it. The messages of one destination and key are sent in
	// order on one connection, so that a broker that keeps order keeps
	// theirs. ctx bounds the whole call: once it is done, Publish returns,
	// the messages not acknowledged by then failing with ctx's error.
	Publish(ctx context.Context, msgs []Message) []error
	// Check reports, before anything is sent, a refusal known in advance
	// (a message over the broker's size limit, or one its client cannot
	// encode: ErrUnencodable): an error wrapping ErrRefused, or nil.
	Check(m Message) error
	// PipelinesKeys reports whether Publish may be given several messages
	// of one destination and key at once: whether, when one of them fails
	// after it was sent, the publisher sees to it that none after it (of
	// its destination and key, in that call) is stored. The relay then
	// hands a key's messages over together; otherwise one per call, each
	// once the one before it was acknowledged.
	PipelinesKeys() bool
	// Ready reports whether the broker is reachable now.
	Ready() bool
	// Close releases the connections; Publish must not be called after.
	Close() error
}
