// Package model holds Promela models of the protocols inboxd's guarantees
// rest on, checked exhaustively by SPIN: the claim's lease, its renewal,
// the completion fenced by the lease token and the rescuer (lease.pml);
// the hand-off at ingest (handoff.pml); an ordered route's key
// (ordered.pml); and the outbox relay's shard leases and per-key order
// (outbox.pml).
//
// Each model's transitions stand for the SQL statements of
// internal/driver/sql (one indivisible step each, as PostgreSQL runs them)
// and the Go between them, named in comments of a fixed form (@sql file,
// @go (*receiver).method, @model for a step of the model's own). Each
// guarantee a model covers is a named assertion (@property), and each
// model lists mutations (@mutation), each of which must make SPIN find a
// counterexample of the property it names.
//
// The tests (make model, part of make test) compile each model once with
// SPIN and run it, then run it again with each mutation turned on
// (INBOXD_MODEL_MUTATION), and check that every named statement file and
// Go function still exists. `make docs` writes what SPIN explored into
// docs/guarantees.md#model-checked-protocols.
package model
