package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/ops"
)

// liveFlags are the flags of cancel and retry, the actions on rows that
// are not finished.
type liveFlags struct {
	filter failedFilter
	dryRun bool
	reason string
}

// liveCommands are `inboxd cancel` and `inboxd retry`.
func liveCommands() []command {
	return []command{
		{name: "cancel", summary: "move received or processing rows to dead, with \"cancelled by <operator>: <reason>\" as their last error (a worker holding one is fenced out and its handler cancelled)",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				var f liveFlags
				f.register(fs, "cancel", "`status` of the rows to cancel: received or processing (default both)")
				fs.StringVar(&f.reason, "reason", "", "why, kept in each row's last error (`TEXT`)")
				return func(cfg config.Config) error {
					return runLive(a.ctx, cfg, a.stdout, a.stderr, a.environ, f, "cancel", "cancelled", "would cancel")
				}
			}},
		{name: "retry", summary: "retry received rows waiting out their backoff now (never a row parked behind its key); requeue retries dead rows",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				var f liveFlags
				f.register(fs, "retry", "")
				return func(cfg config.Config) error {
					return runLive(a.ctx, cfg, a.stdout, a.stderr, a.environ, f, "retry", "retried", "would retry")
				}
			}},
	}
}

// register adds the live filter's flags to fs; statusUsage "" registers
// no --status (retry reads received rows only).
func (f *liveFlags) register(fs *flag.FlagSet, verb, statusUsage string) {
	if statusUsage != "" {
		fs.StringVar(&f.filter.status, "status", "", statusUsage)
	}
	fs.StringVar(&f.filter.ids, "id", "", "only the rows with these `IDS` (comma-separated)")
	registerConditions(fs, &f.filter.eventType, &f.filter.source, &f.filter.errorText, &f.filter.key)
	fs.StringVar(&f.filter.since, "since", "", "only rows received at or after `TIME`: RFC 3339, or a Go duration meaning that long ago (90m, 24h)")
	fs.StringVar(&f.filter.until, "until", "", "only rows received before `TIME`, as --since")
	fs.BoolVar(&f.filter.all, "all", false, "every row the action takes (the other filters narrow it)")
	fs.StringVar(&f.filter.by, "by", "", byUsage)
	fs.BoolVar(&f.dryRun, "dry-run", false, "list what would be done; change nothing")
}

// runLive runs cancel or retry: the rows it changed (or, dry, would), one
// line each for a dry run, and a summary; exit 1 when nothing matched.
func runLive(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, environ []string, f liveFlags, cmd, done, would string) error {
	switch f.filter.status {
	case "", string(status.Received), string(status.Processing):
	default:
		return usageError{fmt.Errorf("%s: --status must be received or processing, got %q", cmd, f.filter.status)}
	}
	if cmd == "retry" {
		f.filter.status = string(status.Received)
	}
	fl := &f.filter
	if fl.ids == "" && fl.eventType == "" && fl.source == "" && fl.errorText == "" && fl.key == "" && fl.since == "" && fl.until == "" && !fl.all {
		return usageError{fmt.Errorf("%s: say which rows: --id 1,2,3, --type T, --source S, --error TEXT, --key K, --since/--until, or --all", cmd)}
	}
	if err := fl.parseSelection(cmd, time.Now()); err != nil {
		return err
	}
	if err := fl.resolveOperator(cmd, cfg, environ); err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	log := adminLog(cfg, stderr, cmd)
	o := newOps(conn, log, nil, nil)
	req := ops.Request{Operator: fl.operator, Filter: fl.opsFilter(), DryRun: f.dryRun, Reason: f.reason, Each: func(v ops.Visit) {
		if v.Row != nil {
			r := v.Row
			fmt.Fprintf(stdout, "%s id %d: %s %s %s, %s, %s, last error: %s\n", would, r.ID, safeText(r.Source), safeText(r.EventID),
				safeText(r.EventType), r.Status, plural(int64(r.Attempts), "attempt"), oneLine(r.LastError, 100))
		}
	}}
	act := o.Cancel
	if cmd == "retry" {
		act = o.RetryNow
	}
	res, err := act(ctx, req)
	log.Info().Str("filter", fl.describe()).Bool("dry_run", f.dryRun).Int64("rows", res.Rows).Int64("audit_id", res.AuditID).Msg(cmd)
	var notify *ops.NotifyError
	switch {
	case errors.As(err, &notify):
		return fmt.Errorf("%s: %w", cmd, err)
	case err != nil && !f.dryRun:
		fmt.Fprintf(stdout, "%s %s before stopping\n", done, plural(res.Rows, "row"))
		return stoppedError(cmd, res.Rows, done, err)
	case err != nil:
		return fmt.Errorf("%s: %w", cmd, err)
	}
	verb := done
	if f.dryRun {
		verb = would
	}
	fmt.Fprintf(stdout, "%s %s\n", verb, plural(res.Rows, "row"))
	if res.Rows == 0 {
		return fmt.Errorf("%s: %w: no row matches %s", cmd, errNothingMatched, fl.describe())
	}
	return nil
}
