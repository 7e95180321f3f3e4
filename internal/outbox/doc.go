// Package outbox is the producer's half of inboxd: the relay that publishes
// the rows of the outbox table (migrations/011_outbox.sql) to Kafka,
// RabbitMQ or NATS JetStream, and the publishers it sends them through.
//
// A relay publishes a shard of the table only under that shard's lease,
// renewed in outbox_shards; every write it makes to a row is fenced by the
// lease's token, so a relay that lost its lease (paused past it, cut off)
// changes nothing once another holds it. It reads rows by status, never
// "above the last id sent", so a row whose transaction commits late is
// published, never skipped. Per (destination, key) it publishes in id order
// among the rows committed when it reads them, one batch at a time: after
// any failure of a key's row no later row of that key is sent in that
// batch (Relay.publish), and a refused row holds its key's later rows back
// until it is published or dead. A row its broker's client cannot encode
// (Validate's rules, which Emit applies before writing) is refused and
// dead at its first attempt, never sent, so it never holds its
// destination.
//
// Delivery is at least once: a crash or a lost lease re-publishes at most
// the batch in flight, each duplicate with the same event_id header (and
// Nats-Msg-Id on NATS, which JetStream itself deduplicates).
package outbox
