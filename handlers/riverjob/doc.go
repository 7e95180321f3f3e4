// Package riverjob enqueues River jobs (github.com/riverqueue/river) for
// inbox events: it is the handlers.JobInserter behind the routes with
// handler: river.
//
// A river route's handler inserts the job with River's InsertTx in the
// transaction that also marks the inbox row processed, and the two commit
// together: the job exists exactly when the row is processed. A failed
// insert, a failed mark or a crash before the commit leaves neither, and
// the row is retried like any other. With the inbox's deduplication on
// (source, event_id) in front, each unique event becomes exactly one job,
// across Kafka redeliveries and daemon crashes: Kafka → River effectively
// once.
//
// # Unique jobs
//
// River's unique-job options (UniqueOpts) are not used, on purpose. The
// inbox already guarantees one job per event: a duplicate delivery never
// becomes a second row, and a row is marked processed, with its job, in
// one transaction, at most once (the mark is fenced by the row's lease).
// River's uniqueness would add a unique-key computation and index check to
// every insert, and it could only make things worse: its keys are built
// from the args, kind, queue or period, so two distinct events with equal
// payloads could be merged, and it stops applying once a finished job has
// been deleted, whereas the inbox row keeps deduplicating as long as it is
// kept.
//
// # The job
//
// The job's kind, queue, priority and max attempts come from the route
// (kind, queue, priority and max_attempts in the routes file): an empty
// queue is River's default queue ("default"), priority 0 is River's
// default (1), and max attempts 0 is River's default (25). Kinds and queue
// names must follow River's rules; CheckJob says whether they do, and the
// daemon checks every river route with it at start-up.
//
// # The args
//
// Every job's args are the JSON object EventArgs describes. For a JSON
// payload:
//
//	{
//	  "event_id": "pay-42",              // the event's id (the inbox row's event_id)
//	  "event_type": "payment.captured",  // the event's type
//	  "source": "payments",              // where it came from (the Kafka topic)
//	  "key": "b3JkZXItNw==",             // the Kafka message key, base64; null when the message had none
//	  "payload": {"amount": 10}          // the payload, as JSON
//	}
//
// and for any other payload, the payload in base64 instead:
//
//	{"event_id": "pay-43", "event_type": "payment.captured", "source": "payments", "key": null,
//	 "payload_base64": "AAEC/w=="}
//
// Exactly one of payload and payload_base64 is present for a non-empty
// payload; an empty payload has neither. The payload goes in as JSON when
// it is valid UTF-8 JSON that PostgreSQL's jsonb accepts (River keeps args
// in a jsonb column, which refuses the escape \u0000 and unpaired UTF-16
// surrogate escapes; such payloads go in as base64). Note that jsonb keeps
// the JSON's value, not its bytes: whitespace, key order and repeated keys
// are not preserved. A worker that needs the exact bytes of a JSON payload
// reads them from the inbox row, found by source and event_id.
//
// A River worker written in Go embeds EventArgs in its args type and names
// the route's kind:
//
//	type PaymentCaptured struct{ riverjob.EventArgs }
//
//	func (PaymentCaptured) Kind() string { return "payment_captured" }
//
//	func (w *PaymentWorker) Work(ctx context.Context, job *river.Job[PaymentCaptured]) error {
//		body := job.Args.PayloadBytes() // the payload, whichever field carried it
//		…
//	}
//
// Workers in other languages decode the same JSON object.
//
// # River's schema
//
// River's tables (river_job and the others) must exist before a river
// route can enqueue: `inboxd migrate --river` applies River's migrations
// (Migrate), and the daemon refuses to start with river routes while they
// are missing (CheckSchema; when the database cannot be asked at start-up,
// an insert that finds them missing fails, retryably, saying so). Like the inbox, River's tables are reached
// unqualified, through the connection's search_path.
package riverjob
