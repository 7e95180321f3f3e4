package ingestcore

// Header is one message header, in the pipeline's terms: a name and its
// value as bytes.
type Header struct {
	// Key is the header's name.
	Key string
	// Value is the header's value.
	Value []byte
}

// Message is one broker message in the pipeline's terms: what a source
// hands to the mapping shared by every source (one rule, one place for ids,
// types, bounds, headers and rejections).
type Message struct {
	// Source is the row's source: the Kafka topic, the RabbitMQ queue.
	Source string
	// EventID, when not empty, is the event id the broker carries as a
	// property of its own (AMQP message_id); it is tried before the
	// headers. EventIDProperty names it in last_error.
	EventID, EventIDProperty string
	// EventType is EventID for the event type (AMQP type).
	EventType, EventTypeProperty string
	// EventIDFallback, when not empty, is the event id taken when neither
	// EventID, the headers nor the JSON field give one (JetStream: the
	// stream and sequence); EventIDFallbackProperty names it in last_error.
	EventIDFallback, EventIDFallbackProperty string
	// EventTypeFallback is EventIDFallback for the event type (JetStream:
	// the subject).
	EventTypeFallback, EventTypeFallbackProperty string
	// Key is the message key (nil: none).
	Key []byte
	// Value is the payload.
	Value []byte
	// Headers are the message's headers, in order.
	Headers []Header
	// Tombstone marks a Kafka tombstone (a nil value): the row gets
	// TombstoneHeader.
	Tombstone bool
	// Kafka reports a Kafka message: Partition and Offset are its
	// position, stored with the row. Other sources' rows store none.
	Kafka bool
	// Partition and Offset are the message's Kafka position (0 elsewhere).
	Partition int32
	Offset    int64
	// Unreadable, when set, says why the source's client could not read
	// the message's headers, UnreadableBytes how big they were: they are
	// not among Headers, and the message is rejected as oversize
	// (Unstored reports its headers not stored).
	Unreadable      string
	UnreadableBytes int
	// RejectID, when set, is the event id of the message's rejected row, a
	// stable id derived from the message so that a redelivery does not add
	// a second rejected row; "" means KafkaPositionID(Source, Partition, Offset).
	RejectID string
}
