// Package ops holds what an operator does to the inbox's rows, written
// once for the CLI (cmd/inboxd/app) and the console (internal/console):
// requeue, discard (unparking the rows a discarded head held back),
// cancel (to dead with "cancelled by <operator>: <reason>"), retry now,
// the re-mapping of rejected rows, pausing and resuming a route (checked
// against the routes the database and the routes file know), an admin's
// rate overrides and breaker resets (limits.go, shared by every replica
// through the route controls: Ops.Limits, whose List reads them), each on a
// selection of rows or on a filter, with a dry run that counts; the lists
// of every status an operator reads (retrying, waiting, processing,
// processed, dead, rejected) with keyset pages; and the audit trail that
// every action writes (who, when, what, on which rows, how many, from
// where).
//
// Every action takes an Operator: a name (never empty, never
// "unknown@…") and where the action comes from. Bulk actions work in
// batches (driver.FailedBatch rows each, a short statement or transaction
// of their own): stopped half-way, what they did stays done, and running
// them again does the rest.
package ops
