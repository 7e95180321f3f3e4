package driver

// The worker's statements, rendered once. These exported strings are a
// step on the way: the engine's components call typed functions of this
// package instead, one per statement, and these go.
var (
	RescueSQL        = load("rescue.sql")
	RescueDelaySQL   = load("rescue_delay.sql")
	StartsOrphansSQL = load("starts_orphans.sql")
	// UnparkSQL is a text/template too, for the rule it shares
	// (sql/holds_key.sql).
	UnparkSQL = renderWorker("unpark.sql", true)
	// UnparkDeletedSQL is a text/template too, for the rule it shares with
	// the completions (sql/unpark_successors.sql).
	UnparkDeletedSQL      = renderWorker("unpark_deleted.sql", true)
	BlockedKeysSQL        = load("blocked_keys.sql")
	StatsSQL              = load("stats.sql")
	RetentionProcessedSQL = load("retention_processed.sql")
	// RetentionFailedSQL and RetentionCountSQL are text/templates too, for
	// the rule they share (sql/holds_key.sql): dead rows that hold their
	// key back are kept.
	RetentionFailedSQL = renderWorker("retention_failed.sql", true)
	RetentionCountSQL  = renderWorker("retention_count.sql", true)
)

// Indexes of the statement variants of the hot path's templated
// statements (sql/claim.sql, sql/complete.sql, sql/complete_tx.sql): Plain
// while the pool has no ordered route, WithOrdered when it has one. The
// plain variants leave the ordered routes' parking and unparking out,
// which spares their planning and their lookups.
const (
	Plain       = 0
	WithOrdered = 1
)

// renderVariants renders the template sql/name without and with the
// ordered routes' part.
func renderVariants(name string) [2]string {
	return [2]string{renderWorker(name, false), renderWorker(name, true)}
}

// renderWorker renders the worker's template sql/name, with the ordered
// routes' part when ordered; the shared templates
// (sql/unpark_successors.sql, sql/holds_key.sql, sql/row_size.sql) are
// there to call.
func renderWorker(name string, ordered bool) string {
	return render(name, struct{ Ordered bool }{ordered},
		"unpark_successors.sql", "holds_key.sql", "row_size.sql")
}

// Variant is the index of the statement variant for a pool whose ordered
// route types are ordered.
func Variant(ordered []string) int {
	if len(ordered) > 0 {
		return WithOrdered
	}
	return Plain
}
