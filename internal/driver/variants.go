package driver

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
// ordered routes' part, with the history's part (.History) when history.
func renderVariants(name string, history bool) [2]string {
	return [2]string{renderWorkerWith(name, false, history), renderWorkerWith(name, true, history)}
}

// renderWorker renders the worker's template sql/name, with the ordered
// routes' part when ordered and without the history's part.
func renderWorker(name string, ordered bool) string {
	return renderWorkerWith(name, ordered, false)
}

// renderWorkerWith renders the worker's template sql/name, with the
// ordered routes' part when ordered and the history's part (the writes of
// the rows' attempts, sql/attempts_record.sql) when history; the shared
// templates (sql/unpark_successors.sql, sql/holds_key.sql,
// sql/row_size.sql, sql/attempts_record.sql) are there to call.
func renderWorkerWith(name string, ordered, history bool) string {
	return render(name, struct{ Ordered, History bool }{ordered, history},
		"unpark_successors.sql", "holds_key.sql", "row_size.sql", "attempts_record.sql")
}

// Variant is the index of the statement variant for a pool whose ordered
// route types are ordered.
func Variant(ordered []string) int {
	if len(ordered) > 0 {
		return WithOrdered
	}
	return Plain
}
