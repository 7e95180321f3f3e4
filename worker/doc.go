// Package worker holds the settings of inboxd's processing engine: Config
// (the worker pool: handlers run at once, claims, leases, retries, the
// shutdown budget) and RetentionConfig (how long rows are kept), the
// RetryPolicy that spaces a row's attempts, and the defaults and bounds of
// every setting (the Default*, Min* and Max* constants), which the
// daemon's INBOXD_* variables take theirs from (package config).
//
// The engine itself runs inside inboxd.Inboxd (inboxd.New with
// inboxd.Config.Worker and inboxd.Config.Retention): a pool claims due
// inbox rows in batches under fenced leases, runs the handler registered
// for each row's event type, writes the outcomes back in batches, retries
// failed rows after the RetryPolicy's delay and dead-letters them after
// MaxAttempts; every replica rescues the rows of expired leases and
// deletes expired rows. What each setting changes: docs/configuration.md
// (the INBOXD_* variable of each) and docs/guarantees.md.
package worker
