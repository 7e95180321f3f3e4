// Package ingest is inboxd's first phase: it consumes brokers and persists
// every message as a row of the inbox table, then acknowledges it to its
// broker. It never runs business code.
//
// # One pipeline, several sources
//
// One persist-then-ack pipeline serves every source: batching by count,
// bytes and time, the writer holding at most two batches (one written, one
// filling), the insert through the driver, the retries of the same batch,
// the row-by-row fallback, rejected rows, readiness and metrics. A source
// only fetches, maps (to Message, then Row, through the one mapping every
// source shares) and acknowledges: the pipeline seals each batch with the
// source's acknowledgement and calls it only after the batch's insert
// committed. NewKafkaSource is the Kafka source (a segmentio/kafka-go consumer
// group; its acknowledgement is the offset commit); NewAMQPSource is the
// RabbitMQ source (one channel per queue with the prefetch as its QoS; its
// acknowledgement is one Ack(multiple=true) per channel up to the batch's
// highest delivery tag). Metrics carry a bounded source_kind label (kafka,
// amqp, nats).
//
// RabbitMQ mapping: source is the queue; event id the message_id property,
// else the id headers; type the type property, else the type headers; key
// the header "key", else the routing key (AMQPKeyHeader says why); payload
// the body; headers the headers table with the properties of
// AMQPProperties (content-type, content-encoding, correlation-id, reply-to,
// expiration, timestamp), message_id and type (the last two
// as amqp-message-id and amqp-type, so that RemapRejectedRow, behind `inboxd
// requeue --status rejected`, can map a rejected row again by RabbitMQ's
// rules). A rejected delivery's event id is
// "<queue>/sha256/<hex>" over what it carries less the headers a broker adds
// to a redelivery (contentRejectID), so a redelivery adds no second row.
// Each queue has a connection of its own, read through amqpFrames, which
// takes out a headers table amqp091-go would refuse (and close the
// connection over) so that its message becomes a rejected row. amqp091-go
// does not reconnect: the source opens a queue's connection again with
// backoff, not ready meanwhile, the other queues going on; deliveries not
// acknowledged go back to their queues when a connection closes, and are
// deduplicated when they come again. The deliveries held are bounded by the prefetch (per queue) times
// the largest message accepted; the default prefetch keeps that within
// 4 x BatchBytes.
//
// NATS JetStream (NewNATSSource): one durable pull consumer per stream, bound
// if it exists, else created with explicit acks from the stream's first
// message. Source is the stream; event id the Nats-Msg-Id header, else the
// id headers, else its position "<stream>/<stream sequence>@<time
// stored>"; type the type headers, else the subject; key the header "key",
// else the subject; payload the data; headers the message's with the
// subject (NATSSubjectHeader). A rejected message's event id is its
// position, the same on every redelivery and different for a stream
// created again under the same name. The source sends its own pull
// requests and tells a stored message from the server's status messages
// by its ack subject, so an empty message with a Status header is a
// message like any other (nats.go's Fetch takes it for a status). Each
// message is acknowledged on its own (Ack, then a flush) once its batch
// committed, never with AckAll, which would acknowledge what the server
// delivered to other replicas of the consumer. A batch written for longer
// than the consumer's AckWait is delivered again (to this replica or
// another) and deduplicated: created consumers get max(30s, 2 x
// WriteTimeout). nats.go reconnects by itself; the source is not ready
// while it is disconnected. A pull asks for at most max(BatchBytes, the
// server's max_payload + 64 KiB), so every message fits in one and the
// bytes held stay bounded.
//
// The rest of this documentation describes the Kafka source.
//
// # Delivery
//
// Messages are fetched with FetchMessage (never ReadMessage) and gathered into
// batches closed by size (Config.BatchSize, default 500), by bytes
// (Config.BatchBytes) or by time (Config.BatchTimeout, default 50ms, counted
// from the batch's first message). A batch is written by one INSERT … SELECT
// FROM unnest(…) ON CONFLICT (source, event_id) DO NOTHING statement, which is
// one transaction; only after it has committed are the offsets committed,
// synchronously (CommitInterval 0), with the highest offset of each partition
// in the batch (a commit covers every lower offset). So an offset is committed
// only once every message at or below it is in the inbox.
//
// If the write fails, the same batch is retried with capped exponential
// backoff (Config.RetryBackoffMin to Config.RetryBackoffMax) until it succeeds
// or Run is stopped; nothing further is fetched meanwhile, so a database
// outage pauses ingest and never skips a message. Ready reports false while a
// write is failing. If the offset commit fails after the rows were written (a
// rebalance, a broker restart), the failure is logged and counted and ingest
// goes on: the messages may be delivered again and the unique index on
// (source, event_id) absorbs the duplicates.
//
// # Mapping
//
// MapMessage turns a message into a Row following the external contract: the
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
//
// # Shutdown and liveness
//
// Run returns when its context is cancelled: the pending batch is written and
// committed within Config.CloseTimeout, then the reader is closed. Closing a
// kafka-go reader can block for the group's rebalance timeout when a join is
// pending (for example after a peer was killed without leaving), so Close is
// bounded by Config.CloseTimeout; offsets are committed per batch, so nothing
// is lost by not waiting.
//
// Healthy reports an error when a FetchMessage call has been waiting longer
// than Config.StallTimeout although messages are known to be waiting on a
// partition this consumer reads (the high-water mark seen on the last message
// of that partition was above it). This catches the known kafka-go failure
// where fetching hangs after broker trouble. Its limits: the backlog is only
// known from messages already fetched, so a hang that starts while the
// consumer is caught up is not detected until a message is fetched again, and
// the knowledge is dropped at every rebalance (the partition may have moved to
// another member). A database outage does not make Healthy fail; it makes Ready
// false.
//
// # Logs and metrics
//
// Logs carry component=ingest and snake_case keys; payloads, SASL passwords and
// database URLs are never logged. kafka-go's own messages go to the logger at
// debug level and its errors at warn level, so an unreachable broker is visible
// while the reader keeps retrying. Metrics are described in metrics.go.
package ingest
