// Package amqpmap is the RabbitMQ source's mapping, out of the source's
// package so that the outbox's tests can map what they published as
// ingest would: a delivery to its row, and the remap rule of the RabbitMQ
// source's rejected rows.
package amqpmap

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/brokers/amqpconn"
	"github.com/inboxd/inboxd/internal/ingestcore"
)

// AMQPKeyHeader is the AMQP header whose value is a message's key (for
// ordered routes); without it the key is the routing key the message was
// published with. A header wins because the routing key often names the
// kind of event ("orders.created") rather than the entity it is about.
const AMQPKeyHeader = "key"

// The AMQP properties stored among a row's headers, beside the headers
// table: the ones that carry meaning for a handler.
const (
	// AMQPContentTypeHeader holds the content-type property.
	AMQPContentTypeHeader = amqpconn.ContentTypeHeader
	// AMQPCorrelationIDHeader holds the correlation-id property.
	AMQPCorrelationIDHeader = amqpconn.CorrelationIDHeader
	// AMQPTimestampHeader holds the timestamp property (RFC 3339, UTC).
	AMQPTimestampHeader = amqpconn.TimestampHeader
	// AMQPMessageIDHeader holds the message_id property, so that a
	// rejected row keeps it and `inboxd requeue` can map it again.
	AMQPMessageIDHeader = amqpconn.MessageIDHeader
	// AMQPTypeHeader holds the type property, for the same reason.
	AMQPTypeHeader = amqpconn.TypeHeader
)

// MapDelivery maps a RabbitMQ delivery from queue to its inbox row. Event
// id: the message_id property, else the headers of opts.EventIDHeaders;
// event type: the type property, else opts.EventTypeHeaders (then the JSON
// fields, as for Kafka). Key: header AMQPKeyHeader, else the routing key.
// Payload: the body. Headers: the headers table (strings as they are, byte
// arrays as bytes, other values as JSON), the properties of AMQPProperties,
// and the message_id and type properties (under AMQPMessageIDHeader and
// AMQPTypeHeader). A message that cannot be accepted
// becomes a rejected row whose event id, derived from the message's
// content, is the same on every redelivery.
func MapDelivery(queue string, d amqp.Delivery, opts ingest.MapOptions) ingestcore.Row {
	return MapRead(queue, d, nil, ingestcore.MapDefaults(opts))
}

// MapRead is MapDelivery with opts ready (defaults applied), and u,
// when not nil, the headers table amqpFrames took out of the delivery.
func MapRead(queue string, d amqp.Delivery, u *Unreadable, opts ingest.MapOptions) ingestcore.Row {
	hs := amqpHeaders(d)
	key := []byte(d.RoutingKey)
	if v, ok := ingestcore.LastHeader(hs, AMQPKeyHeader); ok && len(v) > 0 {
		key = v
	}
	if len(key) == 0 {
		key = nil
	}
	m := &ingestcore.Message{
		Source:  queue,
		EventID: d.MessageId, EventIDProperty: "message_id",
		EventType: d.Type, EventTypeProperty: "type",
		Key:     key,
		Value:   d.Body,
		Headers: hs,
	}
	fields := [][]byte{[]byte(d.Exchange), []byte(d.RoutingKey), []byte(d.MessageId), []byte(d.Type)}
	if u != nil {
		m.Unreadable, m.UnreadableBytes = u.Why, u.Size
		fields = append(fields, u.Digest)
	}
	m.RejectID = ingestcore.ContentRejectID(queue, fields, hs, d.Body)
	return ingestcore.MapRow(m, opts)
}

// amqpHeaders is what a delivery stores as headers: its table, sorted by
// name (a table has no order; sorting makes it stable), then the
// properties that carry meaning.
func amqpHeaders(d amqp.Delivery) []ingestcore.Header {
	names := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	hs := make([]ingestcore.Header, 0, len(names)+5)
	for _, k := range names {
		hs = append(hs, ingestcore.Header{Key: k, Value: amqpValue(d.Headers[k])})
	}
	hs = appendAMQPProperties(hs, &d)
	if d.MessageId != "" {
		hs = append(hs, ingestcore.Header{Key: AMQPMessageIDHeader, Value: []byte(d.MessageId)})
	}
	if d.Type != "" {
		hs = append(hs, ingestcore.Header{Key: AMQPTypeHeader, Value: []byte(d.Type)})
	}
	return hs
}

// amqpValue renders one header table value as bytes.
func amqpValue(v any) []byte {
	switch v := v.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	case nil:
		return nil
	case bool:
		return []byte(strconv.FormatBool(v))
	case time.Time:
		return []byte(v.UTC().Format(time.RFC3339Nano))
	case amqp.Decimal:
		return []byte(fmt.Sprintf("%de-%d", v.Value, v.Scale))
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return []byte(fmt.Sprint(v))
		}
		return b
	}
}

// Rule is the RabbitMQ source's remap rule: a rejected row is mapped
// again by RabbitMQ's rules, with Opts: the message_id and type
// properties, which the row keeps among its headers, come before the
// headers of Opts. The key is the row's (header key or routing key,
// resolved when it was first mapped).
type Rule struct{ Opts ingest.MapOptions }

// Owns reports whether s's event id is a RabbitMQ rejected row's:
// "<queue>/sha256/<hex>" (ingestcore.ContentRejectID).
func (Rule) Owns(s ingestcore.Stored) bool { return ingestcore.IsContentRejectID(s.Source, s.EventID) }

// Remap implements ingestcore.RemapRule.
func (r Rule) Remap(s ingestcore.Stored) ingestcore.Row {
	hs := s.Headers
	id, _ := ingestcore.LastHeader(hs, AMQPMessageIDHeader)
	typ, _ := ingestcore.LastHeader(hs, AMQPTypeHeader)
	return ingestcore.MapRow(&ingestcore.Message{
		Source:  s.Source,
		EventID: string(id), EventIDProperty: "message_id",
		EventType: string(typ), EventTypeProperty: "type",
		Key:      s.Key,
		Value:    s.Payload,
		Headers:  hs,
		RejectID: s.EventID,
	}, ingestcore.MapDefaults(r.Opts))
}

// Unreadable is what amqpFrames noted about a delivery whose headers
// table it took out: why the client could not read it, the table's size
// in bytes, and a digest of its entries that does not depend on those a
// broker adds when it delivers the message again (RedeliveryHeader).
type Unreadable struct {
	// Why the client could not read the table.
	Why string
	// Size is the table's size in bytes.
	Size int
	// Digest is a digest of its entries less the redelivery headers.
	Digest []byte
}
