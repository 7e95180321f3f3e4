// Package console is inboxd's operator console: server-rendered pages
// under /ui/ that show the inbox (rows by status, stale rows, routes,
// throughput, ingest lag, the outbox's backlog), list and open dead and
// rejected rows, find a row by its event id, list the ordered keys a dead
// row holds back, and, for an operator who holds the token, requeue or
// discard rows (a dry-run count first, then the action in batches) and
// pause or resume routes; for an admin, override a route's rate limit and
// reset its circuit breaker (actions.go, through ops.Limits).
//
// With a token, every page and action needs the credential: an
// "Authorization: Bearer" header, or the session cookie the sign-in form
// sets. Sessions are kept by the server in the console_sessions table (the
// cookie holds a random id, the table its SHA-256, the operator's name,
// which token and the expiry), so that a sign-out ends one on every replica
// and a new token ends them all; the cookie is HttpOnly and
// SameSite=Strict, and every form of a cookie session carries a CSRF
// token that every POST must return. Without a token the console is
// read-only and asks for no credential: the daemon serves it so on a
// loopback address only. Every action is logged (who, what, the filter,
// how many), never the token nor a payload. Payloads are shown only when
// Config.ShowPayloads is set; credential-like header values are masked
// (internal/sensitive).
//
// Templates and the style sheet are embedded: no front-end build is
// needed.
package console
