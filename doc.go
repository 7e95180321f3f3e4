// Package inboxd runs the inbox engine inside another program: the
// inbox table (PostgreSQL) that sources fill, and the worker pool that
// drains it through the program's handlers, at least once, with retries
// and dead-lettering; beside it the outbox, the other direction.
//
// A program gives everything as Go values in a Config and calls New, then
// Run:
//
//   - the handlers, in a handlers.Registry: each event type to a Handler
//     (run outside any transaction) or a TxHandler (run inside the
//     transaction that marks the row processed), with its policy
//     (concurrency, attempts, backoff, timeout, order by key, rate, circuit
//     breaker); package handlers;
//   - the database pools (DB for the engine's statements, TxDB for the
//     transactional handlers), a zerolog logger, a Prometheus registerer;
//   - the engine's settings (package worker: the pool, retention), and the
//     sources the process runs, if any (Kafka, RabbitMQ, NATS JetStream,
//     signed webhooks): without one, rows come from the program's own
//     writes to the inbox table, in its own transactions;
//   - Outbox, to run the relay that publishes what Emit wrote to the outbox
//     table in the caller's transaction (Kafka, RabbitMQ, NATS JetStream).
//
// No environment variable is read: the inboxd command (cmd/inboxd) is one
// program that turns INBOXD_* variables into a Config. The schema comes
// from package migrations (`inboxd migrate`, or Config.Migrate).
//
// The stop contract follows River's client: cancelling Run's context or
// calling Stop stops claiming and ingesting and lets running handlers
// finish (within worker.Config.ShutdownTimeout); StopAndCancel cancels the
// running handlers' contexts at once. Ready and Healthy answer readiness
// and liveness probes, Progress says when the engine last moved. An
// operator's pause of a route (PauseRoute, ResumeRoute, PausedRoutes, or
// `inboxd route pause`) holds its rows on every replica.
//
// Package handlers/handlertest tests a program's handlers against the real
// database: it inserts rows as a source would, runs a handler against a
// row as the workers do, and waits for a row's outcome. The Go API guide
// is docs/go-api.md.
package inboxd
