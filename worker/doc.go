// Package worker is inboxd's processing engine: a Pool claims due inbox rows
// in batches, runs the handler registered for each row's event type, and
// writes the outcomes back in batches.
//
// Life of a row:
//
//   - Claim: one short statement (UPDATE … FROM (SELECT … FOR UPDATE SKIP
//     LOCKED)) moves up to a batch of due `received` rows to `processing`,
//     increments attempts and stamps them with a fresh lease token and expiry.
//     No transaction stays open while a plain handler runs.
//   - Handle: plain handlers run concurrently, up to Config.Workers at once.
//     The lease of a row handled for longer than a third of the lease is
//     renewed; if renewal finds the row fenced, the handler's context is
//     cancelled. A transactional handler runs inside the transaction that
//     marks its row processed.
//   - Complete: outcomes are written in batches, each row fenced by its lease
//     token (WHERE id = … AND lease_token = …). A completion that finds the
//     token changed is counted as fenced and not applied.
//   - Retry: a failed attempt returns the row to `received` with available_at
//     pushed back by the RetryPolicy (exponential backoff with jitter); after
//     MaxAttempts, or for errors made with handlers.Permanent, the row goes
//     `dead` with the reason in last_error. Handler panics are recovered and
//     count as a failed attempt.
//   - Rescue: rows whose lease expired (their worker died) go back to
//     `received`, or to `dead` when out of attempts. Every replica runs the
//     rescuer; SKIP LOCKED keeps them out of each other's way.
//
// Workers wake on the inboxd_received notification, which the inbox table's
// trigger sends once per INSERT statement, and poll every PollInterval as a
// fallback, so a row inserted by plain SQL is picked up within a second.
//
// Run stops in two steps: on cancellation it stops claiming and lets
// in-flight handlers finish within ShutdownTimeout, then cancels the rest and
// releases their rows (back to `received`, attempt not counted) so another
// worker takes them at once.
package worker
