// Package kafkamap is the Kafka source's mapping, out of the source's
// package so that the outbox's tests can map what they published as
// ingest would: a Kafka message to its row, and the remap rule of the
// Kafka source's rejected rows.
package kafkamap

import (
	"unsafe"

	"github.com/segmentio/kafka-go"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
)

// MapMessage maps the Kafka message m to its inbox row. It never fails: a
// message that cannot be accepted becomes a rejected row that says why,
// with event id ingestcore.KafkaPositionID(topic, partition, offset). Zero
// fields of opts take the defaults of ingest.DefaultMapOptions (a nil
// header list is the default list; an empty non-nil one means no header is
// consulted).
func MapMessage(m kafka.Message, opts ingest.MapOptions) ingestcore.Row {
	return ingestcore.MapRow(&ingestcore.Message{
		Source:    m.Topic,
		Key:       m.Key,
		Value:     m.Value,
		Headers:   FromKafkaHeaders(m.Headers),
		Tombstone: m.Value == nil, // segmentio/kafka-go hands a zero-length value over as nil too
		Kafka:     true,
		Partition: int32(m.Partition),
		Offset:    m.Offset,
	}, ingestcore.MapDefaults(opts))
}

// Rule is the Kafka source's remap rule: a rejected row is mapped again
// as the message it was made from (its key, payload, headers and position)
// would be now, with Opts.
type Rule struct{ Opts ingest.MapOptions }

// Owns is true of every row: a Kafka row's rejected id is its position,
// which no other kind's has; the registry asks Kafka last.
func (Rule) Owns(ingestcore.Stored) bool { return true }

// Remap implements ingestcore.RemapRule.
func (r Rule) Remap(s ingestcore.Stored) ingestcore.Row {
	m := kafka.Message{Topic: s.Source, Partition: s.Partition, Offset: s.Offset, Key: s.Key, Value: s.Payload}
	if len(s.Headers) > 0 {
		m.Headers = make([]kafka.Header, len(s.Headers))
		for i, h := range s.Headers {
			m.Headers[i] = kafka.Header(h)
		}
	}
	return MapMessage(m, r.Opts)
}

// FromKafkaHeaders is hs in the pipeline's terms, without a copy: the
// mapping runs once per message, at the full rate, and never writes to the
// headers it is given (RowHeaders clones before it changes them).
func FromKafkaHeaders(hs []kafka.Header) []ingestcore.Header {
	return unsafe.Slice((*ingestcore.Header)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}

// Header and kafka.Header have the same fields, so the same layout: this
// conversion compiles only while that holds.
var _ = ingestcore.Header(kafka.Header{})
