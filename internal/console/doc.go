// Package console is inboxd's operator console: server-rendered pages
// under /ui/ that show the inbox (rows by status, stale rows, routes,
// throughput, ingest lag, the outbox's backlog), list and open dead and
// rejected rows, find a row by its event id, list the ordered keys a dead
// row holds back, and, for an operator who holds the token, requeue or
// discard rows (a dry-run count first, then the action in batches) and
// pause or resume routes.
//
// Without a token the console is read-only: no action form is shown and
// every action answers 403. With one, a request is authorised by an
// "Authorization: Bearer" header or by the session cookie the sign-in form
// sets (HMAC-signed, expiring, HttpOnly, SameSite=Strict); every form of a
// cookie session carries a CSRF token that every POST must return. Every
// action is logged (who, what, the filter, how many), never the token nor
// a payload. Payloads are shown only when Config.ShowPayloads is set.
//
// Templates and the style sheet are embedded: no front-end build is
// needed.
package console
