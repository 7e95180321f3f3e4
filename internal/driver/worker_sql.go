package driver

// The worker's statements, rendered once. These exported strings are a
// step on the way: the engine's components call typed functions of this
// package instead, one per statement, and these go.
var (
	// ClaimSQL, CompleteSQL and CompleteTxSQL are the statements on the
	// hot path, each in two variants: [Plain] while the pool has no
	// ordered route, [WithOrdered] when it has one. The files are
	// text/templates (sql/unpark_successors.sql holds the part complete
	// and complete_tx share, sql/holds_key.sql the rule of which rows hold
	// a key back and the hash of the key the key index holds,
	// sql/row_size.sql what a row weighs against the claim's bytes); the
	// plain variants leave the ordered routes' parking and unparking out,
	// which spares their planning and their lookups.
	ClaimSQL      = renderVariants("claim.sql")
	CompleteSQL   = renderVariants("complete.sql")
	CompleteTxSQL = renderVariants("complete_tx.sql")

	RenewSQL           = load("renew.sql")
	MarkStartsSQL      = load("mark_starts.sql")
	SuspectsSQL        = load("suspects.sql")
	PoisonCandidateSQL = load("poison_candidate.sql")
	PoisonSQL          = load("poison.sql")
)

// Indexes of the statement variants.
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
