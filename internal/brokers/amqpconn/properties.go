package amqpconn

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
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

// Property is one of the AMQP basic properties that inboxd carries as a
// row header, the one mapping both ways: the RabbitMQ source stores a
// delivery's property under Header (MapDelivery), and the outbox's
// RabbitMQ publisher sets the property from a row's header of that name
// instead of putting it in the headers table, so that a consumer reads it
// where AMQP puts it (amqplib's properties.contentType) and inboxd's own
// source stores it back under the same header.
type Property struct {
	// Header is the row header that holds the property.
	Header string
	// get returns the property of a delivery; "" when it has none.
	get func(d *amqp.Delivery) string
	// set sets the property of a publishing from a header value, or says
	// why the value cannot be that property.
	set func(p *amqp.Publishing, v string) error
}

// Get returns the property of d as its header's value; "" when d has none.
func (p Property) Get(d *amqp.Delivery) string { return p.get(d) }

// Set sets the property of pub from v, its header's value, or returns why
// v cannot be that property (a shortstr over 255 bytes, an expiration
// that is not a number of milliseconds, a timestamp that is not RFC 3339);
// pub is then unchanged.
func (p Property) Set(pub *amqp.Publishing, v string) error {
	if err := p.set(pub, v); err != nil {
		return fmt.Errorf("header %s %.60q: %w", p.Header, v, err)
	}
	return nil
}

// Properties are the properties inboxd carries as headers, in the
// order the source stores them. message_id and type are not among them:
// they are a row's event id and type.
var Properties = []Property{
	shortstrProperty(ContentTypeHeader, func(d *amqp.Delivery) *string { return &d.ContentType },
		func(p *amqp.Publishing) *string { return &p.ContentType }),
	shortstrProperty(ContentEncodingHeader, func(d *amqp.Delivery) *string { return &d.ContentEncoding },
		func(p *amqp.Publishing) *string { return &p.ContentEncoding }),
	shortstrProperty(CorrelationIDHeader, func(d *amqp.Delivery) *string { return &d.CorrelationId },
		func(p *amqp.Publishing) *string { return &p.CorrelationId }),
	shortstrProperty(ReplyToHeader, func(d *amqp.Delivery) *string { return &d.ReplyTo },
		func(p *amqp.Publishing) *string { return &p.ReplyTo }),
	{
		Header: ExpirationHeader,
		get:    func(d *amqp.Delivery) string { return d.Expiration },
		set: func(p *amqp.Publishing, v string) error {
			// RabbitMQ closes the channel (406) on any other value.
			n, err := strconv.ParseUint(v, 10, 64)
			if !expirationForm.MatchString(v) || err != nil || n > MaxExpiration {
				return fmt.Errorf("not a number of milliseconds from 0 to %d, as RabbitMQ takes an expiration", MaxExpiration)
			}
			p.Expiration = v
			return nil
		},
	},
	{
		Header: TimestampHeader,
		get: func(d *amqp.Delivery) string {
			if d.Timestamp.IsZero() {
				return ""
			}
			return d.Timestamp.UTC().Format(time.RFC3339Nano)
		},
		set: func(p *amqp.Publishing, v string) error {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil || t.Unix() < 0 {
				return fmt.Errorf("not an RFC 3339 time from 1970 on (the timestamp property is seconds since then)")
			}
			p.Timestamp = t.Truncate(time.Second) // the property holds whole seconds
			return nil
		},
	},
}

// MaxExpiration is the largest expiration RabbitMQ takes, in
// milliseconds (its maximum timer, about 49 days).
const MaxExpiration = 1<<32 - 1

// expirationForm is the form of an expiration: decimal digits.
var expirationForm = regexp.MustCompile(`^[0-9]{1,10}$`)

// MaxShortstr is the longest AMQP shortstr, in bytes: the most a
// string property, a headers table's field name, an exchange or a routing
// key can hold.
const MaxShortstr = 255

// shortstrProperty is a string property, a shortstr on the wire.
func shortstrProperty(header string, ofDelivery func(*amqp.Delivery) *string, ofPublishing func(*amqp.Publishing) *string) Property {
	return Property{
		Header: header,
		get:    func(d *amqp.Delivery) string { return *ofDelivery(d) },
		set: func(p *amqp.Publishing, v string) error {
			if len(v) > MaxShortstr {
				return fmt.Errorf("%d bytes, over the %d of an AMQP shortstr", len(v), MaxShortstr)
			}
			*ofPublishing(p) = v
			return nil
		},
	}
}
