package app

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/ops"
)

// auditFlags are the audit command's flags.
type auditFlags struct {
	operator, action, since string
	before                  int64
	limit                   int
	json                    bool
}

// auditCommand is `inboxd audit`: the operators' audit trail.
func auditCommand() command {
	return command{name: "audit", summary: "list the audit trail, newest first: who did what from the CLI or the console, when, from where, on which rows, how many, dry run or not",
		setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
			var f auditFlags
			fs.StringVar(&f.operator, "operator", "", "only entries of this operator (`NAME`)")
			fs.StringVar(&f.action, "action", "", "only entries of this `ACTION`: requeue, discard, cancel, retry_now, pause, resume, sign_in, sign_out")
			fs.StringVar(&f.since, "since", "", "only entries at or after `TIME`: RFC 3339, or a Go duration meaning that long ago")
			fs.Int64Var(&f.before, "before", 0, "only entries older than the entry `ID` (the next page)")
			fs.IntVar(&f.limit, "limit", 50, "at most `N` entries")
			jsonFlagVar(fs, &f.json, "print JSON lines")
			return func(cfg config.Config) error { return runAudit(a.ctx, cfg, a.stdout, f) }
		}}
}

// auditReport is one entry as -o json prints it.
type auditReport struct {
	ID       int64           `json:"id"`
	At       time.Time       `json:"at"`
	Operator string          `json:"operator"`
	Origin   string          `json:"origin"`
	Action   string          `json:"action"`
	DryRun   bool            `json:"dry_run"`
	Filter   json.RawMessage `json:"filter"`
	RowIDs   []int64         `json:"row_ids,omitempty"`
	Rows     int64           `json:"rows"`
	Detail   string          `json:"detail,omitempty"`
	Error    string          `json:"error,omitempty"`
}

func runAudit(ctx context.Context, cfg config.Config, stdout io.Writer, f auditFlags) error {
	if f.limit < 1 || f.limit > 1000 {
		return usageError{fmt.Errorf("audit: --limit must be from 1 to 1000, got %d", f.limit)}
	}
	since, err := parseSince(f.since, time.Now())
	if err != nil {
		return usageError{fmt.Errorf("audit: --since: %w", err)}
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	list, err := ops.New(ops.Config{DB: conn}).Audit(ctx, ops.AuditQuery{Before: f.before, Operator: f.operator, Action: f.action,
		Since: since, Limit: f.limit})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		for _, e := range list {
			if err := enc.Encode(auditReport{ID: e.ID, At: e.At, Operator: e.Operator, Origin: e.Origin, Action: e.Action, DryRun: e.DryRun,
				Filter: json.RawMessage(e.Filter), RowIDs: e.RowIDs, Rows: e.RowCount, Detail: e.Detail, Error: e.Error}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAT\tOPERATOR\tFROM\tACTION\tROWS\tFILTER\tDETAIL")
	for _, e := range list {
		action := e.Action
		if e.DryRun {
			action += " (dry run)"
		}
		if e.Error != "" {
			action += " FAILED"
		}
		detail := e.Detail
		if e.Error != "" {
			detail = strings.TrimSpace(detail + " error: " + e.Error)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.At.UTC().Format(time.RFC3339), safeText(e.Operator), safeText(e.Origin),
			action, e.RowCount, oneLine(e.Filter, 80), oneLine(detail, 80))
	}
	return tw.Flush()
}
