// Package driver is the one place inboxd speaks SQL to its own tables
// (inbox, inbox_starts and the schema migrations create): every statement,
// the status set (package status), the notification channel, and the one
// interpretation of PostgreSQL errors (Classify) that ingest, the worker
// and the CLI share. Packages above it speak Go types.
//
// The statements live one per file in sql/, each with its reasoning (what
// it locks, what it fences, which index it walks); some are text/templates
// that share a rule with others (sql/holds_key.sql, sql/row_size.sql,
// sql/failed_filter.sql, sql/requeue_set.sql). The Go functions beside
// them bind parameters and scan results, and nothing else: what a
// statement decides is written in its file.
//
// River's riverdriver is the model: SQL behind functions that take a
// connection (DB), with errors interpreted in one place.
package driver
