// Package amqpwire is what AMQP 0-9-1 can carry, without a client: the row
// headers that hold AMQP properties, each property's form (a shortstr, an
// expiration, a timestamp), and the bounds RabbitMQ sets. The outbox checks
// a message against these rules when it is written (inboxd.Emit) without
// linking amqp091-go; amqpconn maps the same properties to and from the
// client's types.
package amqpwire

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// The row headers that hold AMQP properties: those of Properties, and
// message_id and type, which are a row's event id and type but are kept
// too, so that a rejected row keeps them and `inboxd requeue` can map it
// again by RabbitMQ's rules.
const (
	// ContentTypeHeader holds the content-type property.
	ContentTypeHeader = "content-type"
	// ContentEncodingHeader holds the content-encoding property.
	ContentEncodingHeader = "content-encoding"
	// CorrelationIDHeader holds the correlation-id property.
	CorrelationIDHeader = "correlation-id"
	// ReplyToHeader holds the reply-to property.
	ReplyToHeader = "reply-to"
	// ExpirationHeader holds the expiration property: the message's
	// time to live in a queue, in milliseconds.
	ExpirationHeader = "expiration"
	// TimestampHeader holds the timestamp property (RFC 3339, UTC).
	TimestampHeader = "timestamp"
	// MessageIDHeader holds the message_id property.
	MessageIDHeader = "amqp-message-id"
	// TypeHeader holds the type property.
	TypeHeader = "amqp-type"
)

// Properties are the headers of the properties inboxd carries as headers,
// in the order the source stores them. message_id and type are not among
// them: they are a row's event id and type.
var Properties = []string{ContentTypeHeader, ContentEncodingHeader, CorrelationIDHeader, ReplyToHeader,
	ExpirationHeader, TimestampHeader}

// MaxShortstr is the longest AMQP shortstr, in bytes: the most a string
// property, a headers table's field name, an exchange or a routing key can
// hold.
const MaxShortstr = 255

// MaxExpiration is the largest expiration RabbitMQ takes, in milliseconds
// (its maximum timer, about 49 days).
const MaxExpiration = 1<<32 - 1

// expirationForm is the form of an expiration: decimal digits.
var expirationForm = regexp.MustCompile(`^[0-9]{1,10}$`)

// MaxPrefetch is the largest prefetch (a channel's QoS) RabbitMQ takes.
const MaxPrefetch = 65535

// IsProperty reports whether header holds a property of Properties.
func IsProperty(header string) bool {
	switch header {
	case ContentTypeHeader, ContentEncodingHeader, CorrelationIDHeader, ReplyToHeader, ExpirationHeader, TimestampHeader:
		return true
	}
	return false
}

// Shortstr checks v as a shortstr property.
func Shortstr(v string) error {
	if len(v) > MaxShortstr {
		return fmt.Errorf("%d bytes, over the %d of an AMQP shortstr", len(v), MaxShortstr)
	}
	return nil
}

// Expiration checks v as an expiration: RabbitMQ closes the channel (406)
// on any value but a number of milliseconds up to MaxExpiration.
func Expiration(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if !expirationForm.MatchString(v) || err != nil || n > MaxExpiration {
		return fmt.Errorf("not a number of milliseconds from 0 to %d, as RabbitMQ takes an expiration", MaxExpiration)
	}
	return nil
}

// Timestamp parses v as a timestamp property: an RFC 3339 time from 1970
// on, in whole seconds (what the property holds).
func Timestamp(v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || t.Unix() < 0 {
		return time.Time{}, fmt.Errorf("not an RFC 3339 time from 1970 on (the timestamp property is seconds since then)")
	}
	return t.Truncate(time.Second), nil
}

// CheckProperty checks v as the value of the property header holds (one
// of Properties), and returns the bytes it takes in a content header frame
// (0 for an empty string property, which is not sent), or why v cannot be
// that property, naming the header.
func CheckProperty(header, v string) (int, error) {
	var err error
	size := 0
	switch header {
	case ExpirationHeader:
		err = Expiration(v)
		size = 1 + len(v)
	case TimestampHeader:
		_, err = Timestamp(v)
		size = 8
	default:
		if err = Shortstr(v); v != "" {
			size = 1 + len(v)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("header %s %.60q: %w", header, v, err)
	}
	return size, nil
}
