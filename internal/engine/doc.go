// Package engine is inboxd's processing engine: a Pool claims due inbox rows
// in batches, runs the handler registered for each row's event type, and
// writes the outcomes back in batches.
//
// Life of a row:
//
//   - Claim: one short statement (UPDATE … FROM (SELECT … FOR UPDATE SKIP
//     LOCKED)) moves up to a batch of due `received` rows to `processing`,
//     increments attempts and stamps them with a fresh lease token and expiry.
//     No transaction stays open while a plain handler runs.
//   - Handle: plain handlers run concurrently, up to worker.Config.Workers
//     at once. The lease of a row handled for longer than a third of the
//     lease is renewed; if renewal finds the row fenced, the handler's context is
//     cancelled. A transactional handler runs inside the transaction that
//     marks its row processed.
//   - Complete: outcomes are written in batches, each row fenced by its lease
//     token (WHERE id = … AND lease_token = …). A completion that finds the
//     token changed is counted as fenced and not applied.
//   - Retry: a failed attempt returns the row to `received` with
//     available_at pushed back by the worker.RetryPolicy (exponential
//     backoff with jitter); after MaxAttempts, or for errors made with handlers.Permanent, the row goes
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
// The engine's parts, in layers, each its own type and file; each is
// built from the pool's archetype (settings.go: its settings, logger,
// metrics and clock) and takes what it needs of the others, never the
// Pool:
//
//   - the books (books.go, job.go, routes.go, route.go): every claimed or
//     handed-off row's job, the routes with their queues and counts, the
//     bytes held, the claims' start bits and the reservations, under one
//     lock; every job state change goes through books.moveLocked, which
//     keeps the route counts, the bytes held and the gauges. They start
//     jobs and give rows back through interfaces the components implement
//     (runner, markQueue, giver);
//   - the claimer (claimer.go): the claim loop, the claim plan (what the
//     next claim may take from the routes' room and the bytes held), and
//     the poison search (the row whose data makes claims fail);
//   - the executor (executor.go): runs each dispatched job's handler on a
//     reused goroutine and turns its error into an outcome by the route's
//     policy (resolved once per route, route.go);
//   - the completer (completer.go): writes the outcomes in fenced batches;
//   - the leaser (lease.go, start.go): renews the leases and records the
//     handlers' starts;
//   - the releaser (release.go): gives rows back unattempted;
//   - the hand-off at ingest (handoff.go): the Pool's Reserve, Deliver and
//     Cancel, through which the ingest of the same process stores rows
//     already reserved for the idle handlers and hands them over with no
//     claim (handoff.HandOff);
//   - the route controls (controls.go, routes.go): the paused routes (read
//     by internal/maintenance's controls reader every 500 ms, with the
//     operators' rate overrides and breaker resets) and each route's
//     circuit breaker take its room out of the claim plan; a rate-limited
//     route's room (its routes file's rate, or an override) is cut to the
//     tokens its fleet-wide bucket grants the claim;
//   - the listener (listener.go): wakes the claim loop on the inbox's
//     notifications;
//   - the Pool (pool.go): wires them, starts and stops them, and runs the
//     shutdown.
//
// The Pool and every part with goroutines of its own (the claimer, the
// completer, the leaser, the listener) keep the start/stop contract of
// internal/startstop, tested by startstoptest.Contract; the executor's
// goroutines belong to the jobs they run.
//
// The lease's fractions (when to renew, how often to look, the margin a
// row needs to start) are in internal/lease. The SQL is the inbox
// driver's (internal/driver). Its settings are package worker's
// (worker.Config), its maintenance services (the rescuer, the sweeper, the
// stats, the route controls' reader, retention) internal/maintenance's.
//
// The pool stops in two steps: once told to (Stop, or the end of Start's
// context) it stops claiming and lets in-flight handlers finish within
// ShutdownTimeout, then cancels the rest and releases their rows (back to
// `received`, attempt not counted) so another worker takes them at once.
package engine
