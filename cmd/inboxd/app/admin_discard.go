package app

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// discardFlags are the discard command's flags.
type discardFlags struct {
	filter failedFilter
	dryRun bool
}

// runDiscard deletes the dead (or rejected) rows the filter selects, says
// what matched and what did not, and logs one line with the filter and the
// count (never a payload). It fails (exit 1) when nothing matched. It works
// in batches (failedBatch rows each, logging its progress); stopped
// half-way, what it deleted stays deleted, and a second run does the rest.
// Deleting a dead row unparks the row behind it on an ordered route, in the
// batch's transaction (see driver.UnparkDeleted): a key held by a dead
// head moves on at once.
func runDiscard(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, f discardFlags) error {
	if err := f.filter.parse("discard", time.Now()); err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	log := adminLog(cfg, stderr, "discard")
	matched := make(map[int64]bool)
	var n int64
	var runErr error
	if f.dryRun {
		n, runErr = f.filter.dryRun(ctx, conn, log, stdout, "discard", nil, matched)
	} else {
		n, runErr = f.filter.eachRange(ctx, conn, log, "deleted", func(after, upto int64) (int64, error) {
			return f.filter.discardRange(ctx, conn, after, upto, matched)
		})
	}

	ev := log.Info().Str("status", f.filter.status).Str("filter", f.filter.describe()).Bool("dry_run", f.dryRun)
	if f.filter.idList != nil {
		ev = ev.Ints64("ids", f.filter.idList)
	}
	if f.filter.eventType != "" {
		ev = ev.Str("event_type", f.filter.eventType)
	}
	if f.filter.source != "" {
		ev = ev.Str("source", f.filter.source)
	}
	if f.filter.sinceTime != nil {
		ev = ev.Time("since", *f.filter.sinceTime)
	}
	if f.filter.untilTime != nil {
		ev = ev.Time("until", *f.filter.untilTime)
	}
	switch {
	case f.dryRun && runErr != nil:
		ev.Int64("would_discard", n).Bool("stopped", true).Msg("discard dry run stopped: nothing deleted")
	case f.dryRun:
		ev.Int64("would_discard", n).Msg("discard dry run: nothing deleted")
	case runErr != nil:
		// Deleted rows always leave a trace, however the run ended.
		ev.Int64("discarded", n).Bool("stopped", true).Msg("discarded rows, then stopped")
	default:
		ev.Int64("discarded", n).Msg("discarded rows")
	}
	if runErr != nil {
		if !f.dryRun {
			fmt.Fprintf(stdout, "discarded %s before stopping\n", plural(n, f.filter.status+" row"))
		}
		return runErr
	}

	why, err := f.filter.unmatched(ctx, conn, matched)
	if err != nil {
		return err
	}
	for _, line := range why {
		fmt.Fprintln(stdout, line)
	}
	verb := "discarded"
	if f.dryRun {
		verb = "would discard"
	}
	fmt.Fprintf(stdout, "%s %s\n", verb, plural(n, f.filter.status+" row"))
	if n == 0 {
		return fmt.Errorf("discard: %w: no %s row matches %s", errNothingMatched, f.filter.status, f.filter.describe())
	}
	return nil
}

// discardRange deletes the matching rows among the ids (after, upto] in one
// transaction, with the unparking of the rows behind the dead ones, and
// returns how many it deleted; with --id it marks each id in matched.
func (f *failedFilter) discardRange(ctx context.Context, conn *pgx.Conn, after, upto int64, matched map[int64]bool) (int64, error) {
	var deleted []driver.DeletedRow
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		deleted, err = driver.DiscardFailed(ctx, tx, f.query(), after, upto)
		if err != nil {
			return err
		}
		if f.status != string(status.Dead) {
			return nil // rejected rows hold no key back
		}
		return driver.UnparkDeleted(ctx, tx, deleted)
	})
	if err != nil {
		return 0, err
	}
	for _, r := range deleted {
		f.mark(matched, r.ID)
	}
	return int64(len(deleted)), nil
}
