package ingest

import (
	"unsafe"

	"github.com/segmentio/kafka-go"
)

// MapMessage maps the Kafka message m to its inbox row. It never fails: a
// message that cannot be accepted becomes a rejected row that says why,
// with event id kafkaPositionID(topic, partition, offset). Zero fields of opts
// take the defaults of DefaultMapOptions (a nil header list is the default
// list; an empty non-nil one means no header is consulted).
func MapMessage(m kafka.Message, opts MapOptions) Row {
	return mapMessage(&sourceMessage{
		Source:    m.Topic,
		Key:       m.Key,
		Value:     m.Value,
		Headers:   fromKafkaHeaders(m.Headers),
		Tombstone: m.Value == nil, // segmentio/kafka-go hands a zero-length value over as nil too
		Kafka:     true,
		Partition: int32(m.Partition),
		Offset:    m.Offset,
	}, opts.withDefaults())
}

// remapRejected maps a rejected row again, as `inboxd requeue --status
// rejected` does once the cause is fixed, by the rules of the source that
// stored it: eventID is the row's event id (which tells a RabbitMQ or a
// NATS row from a Kafka one), m the row's key, payload, headers and position as a Kafka
// message. It knows no webhook source: a webhook source's row stays
// rejected and says so (RemapRejectedRow maps it).
func remapRejected(eventID string, m kafka.Message, opts MapOptions) Row {
	return RemapRejectedRow(eventID, m, opts, nil)
}

// RemapRejectedRow is remapRejected knowing the webhook sources (as
// LoadWebhookMapping reads them; nil: none is known): a webhook source's
// rejected row (its event id is "rejected/sha256:<hex>") is mapped by the
// rules of the source of that name, never by the brokers' (they would take
// the id and type from headers no signature covered); when no source of
// that name is known, the row stays rejected and last_error says why.
func RemapRejectedRow(eventID string, m kafka.Message, opts MapOptions, webhooks []WebhookSourceConfig) Row {
	if isWebhookRejectID(eventID) {
		return remapWebhookRejected(eventID, m, opts, webhooks)
	}
	if isContentRejectID(m.Topic, eventID) {
		return mapAMQPRejected(eventID, m, opts)
	}
	if row, ok := remapNATSRejected(eventID, m.Topic, m.Key, m.Value, fromKafkaHeaders(m.Headers), opts); ok {
		return row
	}
	return MapMessage(m, opts)
}

// fromKafkaHeaders is hs in the pipeline's terms, without a copy: the
// mapping runs once per message, at the full rate, and never writes to the
// headers it is given (rowHeaders clones before it changes them).
func fromKafkaHeaders(hs []kafka.Header) []Header {
	return unsafe.Slice((*Header)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}

// Header and kafka.Header have the same fields, so the same layout: this
// conversion compiles only while that holds.
var _ = Header(kafka.Header{})
