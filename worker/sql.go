package worker

import (
	"embed"
	"strings"
	"text/template"
)

// The worker's SQL, one statement per file in sql/, each explaining its
// locking and fencing.
var (
	// claimSQL, completeSQL and completeTxSQL are the statements on the hot
	// path, each in two variants: [plain] while the pool has no ordered
	// route, [withOrdered] when it has one. The files are text/templates
	// (sql/unpark_successors.sql holds the part complete and complete_tx
	// share, sql/holds_key.sql the rule of which rows hold a key back and
	// the hash of the key the key index holds, sql/row_size.sql what a row
	// weighs against the claim's bytes); the
	// plain variants leave the ordered routes' parking and
	// unparking out, which spares their planning and their lookups.
	claimSQL      = renderVariants("claim.sql")
	completeSQL   = renderVariants("complete.sql")
	completeTxSQL = renderVariants("complete_tx.sql")

	//go:embed sql/renew.sql
	renewSQL string
	//go:embed sql/rescue.sql
	rescueSQL string
	//go:embed sql/rescue_delay.sql
	rescueDelaySQL string
	//go:embed sql/mark_starts.sql
	markStartsSQL string
	//go:embed sql/starts_orphans.sql
	startsOrphansSQL string
	//go:embed sql/suspects.sql
	suspectsSQL string
	//go:embed sql/poison_candidate.sql
	poisonCandidateSQL string
	//go:embed sql/poison.sql
	poisonSQL string
	// unparkSQL is a text/template too, for the rule it shares
	// (sql/holds_key.sql).
	unparkSQL = render("unpark.sql", true)
	//go:embed sql/blocked_keys.sql
	blockedKeysSQL string
	//go:embed sql/stats.sql
	statsSQL string
	//go:embed sql/retention_processed.sql
	retentionProcessedSQL string
	// retentionFailedSQL and retentionCountSQL are text/templates too, for
	// the rule they share (sql/holds_key.sql): dead rows that hold their
	// key back are kept.
	retentionFailedSQL = render("retention_failed.sql", true)
	retentionCountSQL  = render("retention_count.sql", true)
)

// Indexes of the statement variants.
const (
	plain       = 0
	withOrdered = 1
)

//go:embed sql/claim.sql sql/complete.sql sql/complete_tx.sql sql/unpark.sql sql/unpark_deleted.sql sql/unpark_successors.sql sql/holds_key.sql sql/row_size.sql
//go:embed sql/retention_failed.sql sql/retention_count.sql
var templateFiles embed.FS

// renderVariants renders the template sql/name without and with the
// ordered routes' part.
func renderVariants(name string) [2]string {
	return [2]string{render(name, false), render(name, true)}
}

// render renders the template sql/name, with the ordered routes' part when
// ordered; the shared templates (sql/unpark_successors.sql,
// sql/holds_key.sql, sql/row_size.sql) are there to call.
func render(name string, ordered bool) string {
	t := template.Must(template.New(name).ParseFS(templateFiles,
		"sql/"+name, "sql/unpark_successors.sql", "sql/holds_key.sql", "sql/row_size.sql"))
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, name, struct{ Ordered bool }{ordered}); err != nil {
		panic(err)
	}
	return b.String()
}

// variant is the index of the statement variant for a pool whose ordered
// route types are ordered.
func variant(ordered []string) int {
	if len(ordered) > 0 {
		return withOrdered
	}
	return plain
}
