// Package amqp is inboxd's RabbitMQ source for inboxd.Config.Sources:
// New(Config), one channel per queue with the prefetch as its QoS; its
// acknowledgement is one Ack(multiple=true) per channel up to the batch's
// highest delivery tag. Publisher(Config) is the outbox relay's publisher
// to the same server, for inboxd.OutboxConfig.Publishers. Importing it
// links amqp091-go and no other broker client.
//
// RabbitMQ mapping: source is the queue; event id the message_id property,
// else the id headers; type the type property, else the type headers; key
// the header "key", else the routing key (AMQPKeyHeader says why); payload
// the body; headers the headers table with the properties of
// AMQPProperties (content-type, content-encoding, correlation-id, reply-to,
// expiration, timestamp), message_id and type (the last two
// as amqp-message-id and amqp-type, so that the source's remap rule, behind `inboxd
// requeue --status rejected`, can map a rejected row again by RabbitMQ's
// rules). A rejected delivery's event id is
// "<queue>/sha256/<hex>" over what it carries less the headers a broker adds
// to a redelivery (ContentRejectID), so a redelivery adds no second row.
// Each queue has a connection of its own, read through amqpFrames, which
// takes out a headers table amqp091-go would refuse (and close the
// connection over) so that its message becomes a rejected row. amqp091-go
// does not reconnect: the source opens a queue's connection again with
// backoff, not ready meanwhile, the other queues going on; deliveries not
// acknowledged go back to their queues when a connection closes, and are
// deduplicated when they come again. The deliveries held are bounded by the prefetch (per queue) times
// the largest message accepted; the default prefetch keeps that within
// 4 x BatchBytes.
package amqp
