// Package nats is inboxd's NATS JetStream source for
// inboxd.Config.Sources: New(Config); Publisher(Config) is the outbox
// relay's publisher to the same server, for inboxd.OutboxConfig.Publishers.
// Importing it links nats.go and no other broker client.
//
// NATS JetStream: one durable pull consumer per stream, bound
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
package nats
