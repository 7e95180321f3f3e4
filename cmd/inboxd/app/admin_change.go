package app

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
)

// selectingFilter is what changeRun needs of a filter of requeue or
// discard, the inbox's (failedFilter) or the outbox's (outboxFilter).
type selectingFilter interface {
	// selection is the part of the filter they share.
	selection() *rowSelection
	// eachRange calls fn with each range of ids of the rows to look at
	// (see failedFilter.eachRange).
	eachRange(ctx context.Context, conn *pgx.Conn, log zerolog.Logger, kept string,
		fn func(after, upto int64) (int64, error)) (int64, error)
	// unmatched explains the --id rows not in matched.
	unmatched(ctx context.Context, conn *pgx.Conn, matched map[int64]bool) ([]string, error)
	// describe renders the filter for messages and logs.
	describe() string
	// logFields adds the filter's fields to a log line.
	logFields(ev *zerolog.Event) *zerolog.Event
}

// changeRun is one run of a command that changes the rows a filter selects
// (requeue of dead rows, discard, outbox requeue and discard): range after
// range, or, with dryRun, listing them. run says what matched and what did
// not, and fails (exit 1) when nothing matched.
type changeRun struct {
	// cmd names the command in errors and logs: "discard", "outbox requeue".
	cmd string
	// noun is what a row is called: "dead row", "dead outbox row".
	noun string
	// done is what the run did to the rows ("requeued", "discarded"), would
	// what a dry run would do ("would requeue"), kept what the rows changed
	// so far stay when it stops ("requeued", "deleted").
	done, would, kept string
	dryRun            bool
	filter            selectingFilter
	// list lists the matching rows (--dry-run), noting the --id ones in
	// matched, and counts them.
	list func(matched map[int64]bool) (int64, error)
	// change changes the matching rows among the ids (after, upto], notes
	// the --id ones in matched, and counts them.
	change func(after, upto int64, matched map[int64]bool) (int64, error)
	// all, when not nil, does the whole run (an ops action: its ranges, or
	// with dryRun its listing) in place of list and change, noting the --id
	// rows in matched, and counts them; its error already says what stays
	// done.
	all func(matched map[int64]bool) (int64, error)
	// changed, when not nil, runs after the ranges of a run that is not a
	// dry run, also of one that stopped half-way, with how many rows it
	// changed; its error is returned when the ranges did not fail.
	changed func(n int64) error
	// discardLog, for a discard, names the rows in the one line it logs
	// whatever the log level and however it ended ("rows", "outbox rows"):
	// the filter and the count, never a payload (logDiscard). status is
	// the status of the rows, for that line.
	discardLog, status string
}

// run does the run; log takes the progress lines (and a discard's line).
func (r changeRun) run(ctx context.Context, conn *pgx.Conn, log zerolog.Logger, stdout io.Writer) error {
	matched := make(map[int64]bool)
	var n int64
	var err error
	switch {
	case r.all != nil:
		n, err = r.all(matched)
		if err != nil && !r.dryRun {
			err = stoppedError(r.cmd, n, r.kept, err)
		} else if err != nil {
			err = fmt.Errorf("%s: %w", r.cmd, err)
		}
	case r.dryRun:
		n, err = r.list(matched)
	default:
		n, err = r.filter.eachRange(ctx, conn, log, r.kept, func(after, upto int64) (int64, error) {
			return r.change(after, upto, matched)
		})
	}
	if r.discardLog != "" {
		r.logDiscard(log, n, err)
	}
	var changedErr error
	if !r.dryRun && r.changed != nil {
		changedErr = r.changed(n)
	}
	if err != nil {
		if !r.dryRun {
			fmt.Fprintf(stdout, "%s %s before stopping\n", r.done, plural(n, r.noun))
		}
		return err
	}
	if changedErr != nil {
		return changedErr
	}

	if err := printUnmatched(ctx, conn, stdout, r.filter, matched); err != nil {
		return err
	}
	verb := r.done
	if r.dryRun {
		verb = r.would
	}
	fmt.Fprintf(stdout, "%s %s\n", verb, plural(n, r.noun))
	if n == 0 {
		return fmt.Errorf("%s: %w: no %s matches %s", r.cmd, errNothingMatched, r.noun, r.filter.describe())
	}
	return nil
}

// logDiscard writes the line a discard logs: n rows, err the error that
// stopped it.
func (r changeRun) logDiscard(log zerolog.Logger, n int64, err error) {
	ev := r.filter.logFields(log.Info().Str("status", r.status).Str("filter", r.filter.describe()).Bool("dry_run", r.dryRun))
	switch {
	case r.dryRun && err != nil:
		ev.Int64("would_discard", n).Bool("stopped", true).Msg(r.cmd + " dry run stopped: nothing deleted")
	case r.dryRun:
		ev.Int64("would_discard", n).Msg(r.cmd + " dry run: nothing deleted")
	case err != nil:
		// Deleted rows always leave a trace, however the run ended.
		ev.Int64("discarded", n).Bool("stopped", true).Msg("discarded " + r.discardLog + ", then stopped")
	default:
		ev.Int64("discarded", n).Msg("discarded " + r.discardLog)
	}
}

// changeIDs is a change (changeRun.change) by a statement that returns the
// ids of the rows it changed in a range: it notes the --id ones in matched
// and counts them.
func (s *rowSelection) changeIDs(stmt func(after, upto int64) ([]int64, error)) func(after, upto int64, matched map[int64]bool) (int64, error) {
	return func(after, upto int64, matched map[int64]bool) (int64, error) {
		ids, err := stmt(after, upto)
		s.mark(matched, ids...)
		return int64(len(ids)), err
	}
}

// printUnmatched prints a line for each --id row of f not in matched, saying
// why it was not selected (selectingFilter.unmatched).
func printUnmatched(ctx context.Context, conn *pgx.Conn, stdout io.Writer, f selectingFilter, matched map[int64]bool) error {
	why, err := f.unmatched(ctx, conn, matched)
	if err != nil {
		return err
	}
	for _, line := range why {
		fmt.Fprintln(stdout, line)
	}
	return nil
}
