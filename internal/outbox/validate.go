package outbox

import (
	"errors"
	"slices"
	"strings"

	"github.com/inboxd/inboxd/internal/driver"
)

// encodingRules are, by kind, the rules of what a broker's client can
// encode, checked on a message before it is sent (the publishers' Check)
// and before it is written (Validate, for Emit): each returns the reasons m
// breaks them, none when it is fine. A kind without rules carries any
// message its destination parses for (Kafka: header names and values are
// any bytes).
var encodingRules = map[string]func(m Message) []string{
	KindAMQP: func(m Message) []string { return AMQPEncodable(m, DefaultAMQPFrameSize) },
	KindNATS: NATSEncodable,
}

// eventIDStandIn stands for the event id the database makes (a UUID) when
// a message to validate has none.
const eventIDStandIn = "00000000-0000-0000-0000-000000000000"

// Validate returns every reason the message a row makes (m, as Emit
// writes it) could not be carried to its destination, an error each: a
// destination that does not parse (the rule the table's
// outbox_destination_check also enforces), then its broker's encoding
// rules (NATS header names and values; AMQP shortstrs, properties, the
// size of a frame); none when it can be. The relay's publishers apply the
// same rules before sending: a row written past them (by plain SQL) is
// refused, dead at its first attempt (ErrUnencodable), and never blocks
// its destination. Sizes the broker's configuration sets (max_payload,
// max.message.bytes) are the relay's to check, not Validate's.
func Validate(m driver.OutboxMessage) []error {
	dest, err := ParseDestination(m.Destination)
	if err != nil {
		return []error{err}
	}
	rules := encodingRules[dest.Kind]
	if rules == nil {
		return nil
	}
	id := m.EventID
	if id == "" {
		id = eventIDStandIn
	}
	var errs []error
	for _, why := range rules(newMessage(0, dest, id, m.EventType, m.Key, m.Headers, m.Payload)) {
		errs = append(errs, errors.New(why))
	}
	return errs
}

// UnencodableError is Check's error for the reasons m breaks its kind's
// encoding rules, or nil.
func UnencodableError(reasons []string) error {
	if len(reasons) == 0 {
		return nil
	}
	return Unencodable("%s", strings.Join(reasons, "; "))
}

// newMessage is the message a row makes: its headers sorted by name, with
// the event id and type set (a header of either name among headers is
// replaced).
func newMessage(id int64, dest Destination, eventID, eventType, key string, headers map[string]string, payload []byte) Message {
	hs := make([]Header, 0, len(headers)+2)
	for k, v := range headers {
		if k == EventIDHeader || k == EventTypeHeader {
			continue
		}
		hs = append(hs, Header{Key: k, Value: v})
	}
	hs = append(hs, Header{Key: EventIDHeader, Value: eventID}, Header{Key: EventTypeHeader, Value: eventType})
	slices.SortFunc(hs, func(a, b Header) int { return strings.Compare(a.Key, b.Key) })
	return Message{
		ID: id, Destination: dest, EventID: eventID, EventType: eventType,
		Key: key, Headers: hs, Payload: payload,
	}
}
