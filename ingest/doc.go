// Package ingest holds the settings every source of inboxd shares: the
// batching, mapping and write settings of the persist-then-ack pipeline
// (PipelineConfig, MapOptions), TLS to a broker (TLSConfig), their defaults
// and bounds, and the kinds of source. The sources are packages of their
// own, each linking its broker's client alone: ingest/kafka, ingest/amqp,
// ingest/nats and ingest/webhook; an embedder lists them in
// inboxd.Config.Sources. Ingest is inboxd's first phase: a source consumes
// its broker and persists every message as a row of the inbox table, then
// acknowledges it to its broker. It never runs business code.
//
// # One pipeline, several sources
//
// One persist-then-ack pipeline (internal/ingestcore) serves every source: batching by count,
// bytes and time, the writer holding at most two batches (one written, one
// filling), the insert through the driver, the retries of the same batch,
// the row-by-row fallback, rejected rows, readiness and metrics. A source
// only fetches, maps (to Message, then Row, through the one mapping every
// source shares) and acknowledges: the pipeline seals each batch with the
// source's acknowledgement and calls it only after the batch's insert
// committed. ingest/kafka is the Kafka source (a segmentio/kafka-go consumer
// group; its acknowledgement is the offset commit); ingest/amqp is the
// RabbitMQ source (one channel per queue with the prefetch as its QoS; its
// acknowledgement is one Ack(multiple=true) per channel up to the batch's
// highest delivery tag). Metrics carry a bounded source_kind label (kafka,
// amqp, nats).
//
// # Mapping
//
// Each message becomes a row following the external contract: the
// event id comes from the first of Config.Mapping.EventIDHeaders present
// (default event_id, then ce_id), the type from EventTypeHeaders (default
// event_type, then ce_type), optionally from a top-level JSON field of the
// payload when no header carries it. source and kafka_topic are the topic, key
// is the message key (NULL when absent), payload the value byte for byte
// (bytea) and headers a JSON object {name: value}; a value that is not valid
// UTF-8 or holds a NUL byte is stored as {"base64": "…"}; when a name repeats
// the last value wins. A tombstone (a nil value) gets the header
// TombstoneHeader ("inboxd-tombstone": "true"), which no other row has.
//
// Bad input never blocks a partition: a message without a usable id or type,
// or whose payload is larger than Config.Mapping.MaxPayload, its headers than
// Config.Mapping.MaxHeaders or its key than MaxKeyBytes, becomes a row with
// status rejected, event_id "<topic>/<partition>/<offset>" and a last_error
// naming the problem, and its offset is committed like any other. What is over
// its bound is not stored; last_error gives its size (and, for a payload or a
// key, its SHA-256) instead. Should
// the database still refuse a row (a data error, which validation is meant to
// prevent), the batch is written row by row and the refused row is stored as a
// rejected placeholder instead of being retried for ever.
package ingest
