// Package kafka is inboxd's Kafka source (a segmentio/kafka-go consumer
// group) for inboxd.Config.Sources: New(Config); and Publisher(Config,
// compression), the outbox relay's publisher to the same brokers (a
// franz-go producer) for inboxd.OutboxConfig.Publishers. Its batching and
// mapping settings are package ingest's, shared by every source. Importing
// it links kafka-go and franz-go, Kafka's clients, and no other broker's.
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
package kafka
