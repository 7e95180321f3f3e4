package app

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/driver"
)

// outboxChangeFlags are the outbox requeue and discard commands' flags.
type outboxChangeFlags struct {
	filter outboxFilter
	dryRun bool
}

// runOutboxRequeue hands the dead outbox rows the filter selects back to
// the relay (pending, attempts 0, due now; last_error kept) and says what
// matched and what did not. It fails (exit 1) when nothing was requeued. It
// works in batches (failedBatch rows each, each its own statement, logging
// its progress on stderr); stopped half-way, it leaves what it requeued
// requeued, for a second run to do the rest. The relay finds the rows at
// its next read. A requeued row is published after the rows of its key
// that were published while it was dead: they already went out.
func runOutboxRequeue(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, f outboxChangeFlags) error {
	const cmd = "outbox requeue"
	if err := f.filter.parse(cmd, time.Now(), true); err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	log := adminLog(cfg, stderr, cmd)

	matched := make(map[int64]bool)
	var n int64
	if f.dryRun {
		n, err = f.filter.dryRun(ctx, conn, log, stdout, "requeue", matched)
		if err != nil {
			return err
		}
	} else {
		n, err = f.filter.eachRange(ctx, conn, log, "requeued", func(after, upto int64) (int64, error) {
			ids, err := driver.RequeueOutboxDead(ctx, conn, f.filter.query(), after, upto)
			f.filter.mark(matched, ids...)
			return int64(len(ids)), err
		})
		if err != nil {
			fmt.Fprintf(stdout, "requeued %s before stopping\n", plural(n, "dead outbox row"))
			return err
		}
	}
	why, err := f.filter.unmatched(ctx, conn, matched)
	if err != nil {
		return err
	}
	for _, line := range why {
		fmt.Fprintln(stdout, line)
	}
	verb := "requeued"
	if f.dryRun {
		verb = "would requeue"
	}
	fmt.Fprintf(stdout, "%s %s\n", verb, plural(n, "dead outbox row"))
	if n == 0 {
		return fmt.Errorf("%s: %w: no dead outbox row matches %s", cmd, errNothingMatched, f.filter.describe())
	}
	return nil
}

// runOutboxDiscard deletes the dead outbox rows the filter selects, says
// what matched and what did not, and logs one line with the filter and the
// count (never a payload). It fails (exit 1) when nothing matched. Batched
// and resumable as runOutboxRequeue. A dead row holds no key back, so
// nothing else changes.
func runOutboxDiscard(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, f outboxChangeFlags) error {
	const cmd = "outbox discard"
	if err := f.filter.parse(cmd, time.Now(), true); err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	log := adminLog(cfg, stderr, cmd)

	matched := make(map[int64]bool)
	var n int64
	var runErr error
	if f.dryRun {
		n, runErr = f.filter.dryRun(ctx, conn, log, stdout, "discard", matched)
	} else {
		n, runErr = f.filter.eachRange(ctx, conn, log, "deleted", func(after, upto int64) (int64, error) {
			ids, err := driver.DiscardOutboxDead(ctx, conn, f.filter.query(), after, upto)
			f.filter.mark(matched, ids...)
			return int64(len(ids)), err
		})
	}

	ev := log.Info().Str("status", "dead").Str("filter", f.filter.describe()).Bool("dry_run", f.dryRun)
	if f.filter.idList != nil {
		ev = ev.Ints64("ids", f.filter.idList)
	}
	if f.filter.destination != "" {
		ev = ev.Str("destination", f.filter.destination)
	}
	if f.filter.eventType != "" {
		ev = ev.Str("event_type", f.filter.eventType)
	}
	if f.filter.sinceTime != nil {
		ev = ev.Time("since", *f.filter.sinceTime)
	}
	if f.filter.untilTime != nil {
		ev = ev.Time("until", *f.filter.untilTime)
	}
	if f.filter.errorPart != "" {
		ev = ev.Str("error", f.filter.errorPart)
	}
	switch {
	case f.dryRun && runErr != nil:
		ev.Int64("would_discard", n).Bool("stopped", true).Msg("outbox discard dry run stopped: nothing deleted")
	case f.dryRun:
		ev.Int64("would_discard", n).Msg("outbox discard dry run: nothing deleted")
	case runErr != nil:
		// Deleted rows always leave a trace, however the run ended.
		ev.Int64("discarded", n).Bool("stopped", true).Msg("discarded outbox rows, then stopped")
	default:
		ev.Int64("discarded", n).Msg("discarded outbox rows")
	}
	if runErr != nil {
		if !f.dryRun {
			fmt.Fprintf(stdout, "discarded %s before stopping\n", plural(n, "dead outbox row"))
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
	fmt.Fprintf(stdout, "%s %s\n", verb, plural(n, "dead outbox row"))
	if n == 0 {
		return fmt.Errorf("%s: %w: no dead outbox row matches %s", cmd, errNothingMatched, f.filter.describe())
	}
	return nil
}

// dryRun lists the matching dead outbox rows batch after batch, each as
// "would VERB id N: destination event_id event_type, key K, N attempts,
// last error: …", noting in matched the --id rows that matched, and counts
// them.
func (f *outboxFilter) dryRun(ctx context.Context, conn *pgx.Conn, log zerolog.Logger, stdout io.Writer,
	verb string, matched map[int64]bool) (int64, error) {
	return f.eachRange(ctx, conn, log, "", func(after, upto int64) (int64, error) {
		list, err := driver.MatchOutboxDead(ctx, conn, f.query(), after, upto)
		if err != nil {
			return 0, fmt.Errorf("select dead outbox rows: %w", err)
		}
		for _, r := range list {
			f.mark(matched, r.ID)
			fmt.Fprintf(stdout, "would %s id %d: %s %s %s, key %s, %s, last error: %s\n", verb, r.ID, safeText(r.Destination),
				safeText(r.EventID), safeText(r.EventType), outboxKey(r.Key), plural(int64(r.Attempts), "attempt"), oneLine(r.LastError, 100))
		}
		return int64(len(list)), nil
	})
}
