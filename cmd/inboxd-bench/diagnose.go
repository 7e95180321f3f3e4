package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/engine"
	"github.com/inboxd/inboxd/worker"
)

// Statement is one statement's share of a measurement, from
// pg_stat_statements.
type Statement struct {
	// Query names the statement: the first line of its leading comment,
	// else of its SQL, cut to 100 characters.
	Query string `json:"query"`
	// Calls is how many times it ran.
	Calls int64 `json:"calls"`
	// Rows is the rows it returned or changed, in all.
	Rows int64 `json:"rows"`
	// TotalMS is its execution time in all (wall time inside the server,
	// waits and CPU contention included), in milliseconds.
	TotalMS float64 `json:"total_ms"`
	// PerRowUS is TotalMS per row, in microseconds.
	PerRowUS float64 `json:"per_row_us"`
}

// Diagnosis is where the time goes: the top statements of the end-to-end
// measurement and the plan of a claim on a backlog.
type Diagnosis struct {
	// Statements are the statements that took the most time during the
	// end-to-end measurement (empty when pg_stat_statements is not loaded:
	// see StatementsNote).
	Statements []Statement `json:"statements,omitempty"`
	// StatementsNote says why Statements is empty.
	StatementsNote string `json:"statements_note,omitempty"`
	// ClaimPlan is EXPLAIN (ANALYZE, BUFFERS) of a claim by a pool with
	// the daemon's defaults on BacklogRows received rows.
	ClaimPlan string `json:"claim_plan,omitempty"`
	// BacklogRows is the backlog the claim was explained on.
	BacklogRows int `json:"backlog_rows,omitempty"`
}

// statementsMeter resets pg_stat_statements and later reads its top
// statements; it is a no-op (with a note) when the extension cannot be
// used on this server.
type statementsMeter struct {
	env  *environment
	note string
}

func startStatements(ctx context.Context, env *environment) *statementsMeter {
	m := &statementsMeter{env: env}
	err := env.adminExec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	if err == nil {
		err = env.adminExec(ctx, `SELECT pg_stat_statements_reset()`)
	}
	if err != nil {
		m.note = "pg_stat_statements is not available (add it to shared_preload_libraries to see the top statements): " +
			strings.TrimSpace(err.Error())
	}
	return m
}

// top returns the statements that ran at least minRows rows, by total
// time, at most n.
func (m *statementsMeter) top(ctx context.Context, n int, minRows int64) ([]Statement, error) {
	if m.note != "" {
		return nil, nil
	}
	conn, err := pgx.Connect(ctx, m.env.adminURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
SELECT query, calls, rows, total_exec_time
FROM pg_stat_statements
WHERE rows >= $1
ORDER BY total_exec_time DESC
LIMIT $2`, minRows, n)
	if err != nil {
		return nil, err
	}
	var out []Statement
	var s Statement
	var query string
	_, err = pgx.ForEachRow(rows, []any{&query, &s.Calls, &s.Rows, &s.TotalMS}, func() error {
		s.Query = firstSQLLine(query, 100)
		s.PerRowUS = s.TotalMS * 1000 / float64(max(s.Rows, 1))
		out = append(out, s)
		return nil
	})
	return out, err
}

// firstSQLLine names a statement: the first line of its leading comment
// (inboxd's statements open with one saying what they do), else its first
// line of SQL; runs of spaces folded, cut to n characters.
func firstSQLLine(query string, n int) string {
	for _, line := range strings.Split(query, "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" || strings.HasPrefix(line, "{{") {
			continue
		}
		line = strings.TrimSpace(strings.TrimPrefix(line, "--"))
		if len(line) > n {
			line = line[:n-1] + "…"
		}
		return line
	}
	return ""
}

// explainClaim explains a claim by a pool with the daemon's defaults on a
// backlog of n received rows of one routed type.
func explainClaim(ctx context.Context, env *environment, n int) (string, error) {
	_, pool, done, err := env.open(ctx, 4)
	if err != nil {
		return "", err
	}
	defer done()
	if err := insertRows(ctx, pool, "explain", n); err != nil {
		return "", err
	}
	if _, err := pool.Exec(ctx, `ANALYZE inbox`); err != nil {
		return "", err
	}
	reg := handlers.NewRegistry()
	if err := reg.Handle(eventType, handlers.Ignore()); err != nil {
		return "", err
	}
	return engine.ExplainClaim(ctx, pool, reg, worker.Config{}) // the default config
}

// printDiagnosis writes d's statements and claim plan.
func printDiagnosis(out io.Writer, d *Diagnosis) {
	fmt.Fprintln(out)
	if d.StatementsNote != "" {
		fmt.Fprintln(out, "top statements of the end-to-end run:", d.StatementsNote)
	} else if len(d.Statements) > 0 {
		fmt.Fprintln(out, "top statements of the end-to-end run (pg_stat_statements; time inside the server, waits included):")
		fmt.Fprintf(out, "  %7s %9s %9s %8s  %s\n", "calls", "rows", "total ms", "µs/row", "statement")
		for _, s := range d.Statements {
			fmt.Fprintf(out, "  %7d %9d %9.0f %8.1f  %s\n", s.Calls, s.Rows, s.TotalMS, s.PerRowUS, s.Query)
		}
	}
	if d.ClaimPlan != "" {
		fmt.Fprintf(out, "\nthe claim on a backlog of %d rows (EXPLAIN ANALYZE, rolled back):\n", d.BacklogRows)
		for _, line := range strings.Split(d.ClaimPlan, "\n") {
			fmt.Fprintln(out, "  "+line)
		}
	}
}
