// Package handlers is inboxd's Go API for business code: the Event a worker
// hands over, the Handler and TxHandler interfaces, the Registry that maps
// exact event types to handlers, the error helpers that steer retries
// (Permanent, RetryAfter), and the built-in handlers that the routes file
// names (http, ignore, dead).
//
// A Handler runs outside any database transaction and may take as long as it
// needs: the worker renews the row's lease while it runs. It is at-least-once:
// after a crash the same event can be handed over again, so a Handler that
// calls another system passes it an idempotency key unique per row. An event
// id is unique only within its source (rows are unique on (source,
// event_id)), so the key must carry both: IdempotencyKeyFor(ev) gives
// "<source>/<event id>".
//
// A TxHandler runs inside the transaction that marks the row processed: its
// database writes commit together with the row, or not at all. It should do
// short database work only, since it holds a transaction open.
//
// A BatchHandler or TxBatchHandler (Registry.HandleBatch, HandleTxBatch)
// takes a route's rows many at a time, as the route's Batch says (Batching):
// each row keeps its own attempts, lease and outcome, given by RowErrors;
// any other error is the whole batch's and retries every row of it. A
// TxBatchHandler's writes commit with every row's outcome. An http or
// river route with a batch in the routes file is one too.
//
// Errors decide what happens to the row: nil marks it processed; an error
// wrapped by Permanent sends it to dead at once; any other error retries it
// with exponential backoff (RetryAfter asks for a specific delay) until the
// attempts are used up.
//
// Operators route event types to the built-in handlers with a YAML routes
// file (INBOXD_ROUTES, docs/routes.md): the daemon parses it into Routes,
// and Routes.Register puts them on a Registry, beside any handlers
// registered in Go. The http
// handler (NewHTTP) POSTs each payload with Idempotency-Key
// "<source>/<event id>" (a route's idempotency_key: event_id, or
// HTTPConfig.IdempotencyKey, sends the bare event id instead), and the event
// id and source in Inbox-Event-Id and Inbox-Source, each percent-encoded
// where a header could not carry it exactly (EscapeHeaderValue).
package handlers
