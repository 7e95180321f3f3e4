package amqpmap

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/internal/brokers/amqpconn"
	"github.com/inboxd/inboxd/internal/ingestcore"
)

// The AMQP properties stored among a row's headers beside
// AMQPContentTypeHeader, AMQPCorrelationIDHeader and AMQPTimestampHeader
// (the table both ways is internal/brokers/amqpconn's).
const (
	// AMQPContentEncodingHeader holds the content-encoding property.
	AMQPContentEncodingHeader = amqpconn.ContentEncodingHeader
	// AMQPReplyToHeader holds the reply-to property.
	AMQPReplyToHeader = amqpconn.ReplyToHeader
	// AMQPExpirationHeader holds the expiration property: the message's
	// time to live in a queue, in milliseconds.
	AMQPExpirationHeader = amqpconn.ExpirationHeader
)

// appendAMQPProperties appends to hs, as headers, the properties of
// amqpconn.Properties that d has.
func appendAMQPProperties(hs []ingestcore.Header, d *amqp.Delivery) []ingestcore.Header {
	for _, p := range amqpconn.Properties {
		if v := p.Get(d); v != "" {
			hs = append(hs, ingestcore.Header{Key: p.Header, Value: []byte(v)})
		}
	}
	return hs
}
