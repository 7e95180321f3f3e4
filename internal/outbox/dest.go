package outbox

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// The kinds of destination, the prefix of a destination before its colon.
const (
	KindKafka = "kafka"
	KindAMQP  = "amqp"
	KindNATS  = "nats"
)

// Destination is where a row is published, parsed from its destination
// column.
type Destination struct {
	// Kind is KindKafka, KindAMQP or KindNATS.
	Kind string
	// Name is the Kafka topic, the AMQP exchange ("" is the default
	// exchange) or the NATS subject.
	Name string
	// RoutingKey is the AMQP routing key; empty for the other kinds.
	RoutingKey string
}

// String is the destination as the destination column writes it.
func (d Destination) String() string {
	if d.Kind == KindAMQP {
		return d.Kind + ":" + d.Name + "/" + d.RoutingKey
	}
	return d.Kind + ":" + d.Name
}

var (
	kafkaTopic  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)
	natsSubject = regexp.MustCompile(`^[^\s*>]+$`)
)

// ErrBadDestination is wrapped by ParseDestination's errors.
var ErrBadDestination = errors.New("bad outbox destination")

// ParseDestination parses a destination column: kafka:<topic>,
// amqp:<exchange>/<routing key> or nats:<subject>, the rule the table's
// outbox_destination_check constraint also enforces.
func ParseDestination(s string) (Destination, error) {
	kind, rest, ok := strings.Cut(s, ":")
	bad := func(why string) (Destination, error) {
		return Destination{}, fmt.Errorf("%w %q: %s", ErrBadDestination, s, why)
	}
	if !ok {
		return bad("want kafka:<topic>, amqp:<exchange>/<routing key> or nats:<subject>")
	}
	switch kind {
	case KindKafka:
		if !kafkaTopic.MatchString(rest) {
			return bad("a Kafka topic is 1 to 249 of A-Z a-z 0-9 . _ -")
		}
		return Destination{Kind: KindKafka, Name: rest}, nil
	case KindAMQP:
		ex, rk, ok := strings.Cut(rest, "/")
		if !ok {
			return bad("want amqp:<exchange>/<routing key> (amqp:/<queue> for the default exchange)")
		}
		if len(ex) > 255 || len(rk) > 255 {
			return bad("an AMQP exchange and routing key are at most 255 bytes each")
		}
		return Destination{Kind: KindAMQP, Name: ex, RoutingKey: rk}, nil
	case KindNATS:
		if !natsSubject.MatchString(rest) || strings.HasPrefix(rest, ".") || strings.HasSuffix(rest, ".") || strings.Contains(rest, "..") {
			return bad("a NATS subject is dot-separated tokens, without spaces or wildcards")
		}
		return Destination{Kind: KindNATS, Name: rest}, nil
	}
	return bad("unknown kind " + fmt.Sprintf("%q", kind) + ": want kafka, amqp or nats")
}
