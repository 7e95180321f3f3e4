package amqpconn

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/internal/brokers/amqpwire"
)

// The row headers that hold AMQP properties, and their bounds, are
// amqpwire's (the rules without the client).
const (
	ContentTypeHeader     = amqpwire.ContentTypeHeader
	ContentEncodingHeader = amqpwire.ContentEncodingHeader
	CorrelationIDHeader   = amqpwire.CorrelationIDHeader
	ReplyToHeader         = amqpwire.ReplyToHeader
	ExpirationHeader      = amqpwire.ExpirationHeader
	TimestampHeader       = amqpwire.TimestampHeader
	MessageIDHeader       = amqpwire.MessageIDHeader
	TypeHeader            = amqpwire.TypeHeader
	MaxShortstr           = amqpwire.MaxShortstr
	MaxPrefetch           = amqpwire.MaxPrefetch
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
			if err := amqpwire.Expiration(v); err != nil {
				return err
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
			t, err := amqpwire.Timestamp(v)
			if err != nil {
				return err
			}
			p.Timestamp = t
			return nil
		},
	},
}

// shortstrProperty is a string property, a shortstr on the wire.
func shortstrProperty(header string, ofDelivery func(*amqp.Delivery) *string, ofPublishing func(*amqp.Publishing) *string) Property {
	return Property{
		Header: header,
		get:    func(d *amqp.Delivery) string { return *ofDelivery(d) },
		set: func(p *amqp.Publishing, v string) error {
			if err := amqpwire.Shortstr(v); err != nil {
				return err
			}
			*ofPublishing(p) = v
			return nil
		},
	}
}
