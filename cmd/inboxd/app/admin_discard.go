package app

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
)

//go:embed sql/discard.sql
var discardSQL string

// discardFlags are the discard command's flags.
type discardFlags struct {
	filter failedFilter
	dryRun bool
}

// runDiscard deletes the dead (or rejected) rows the filter selects, says
// what matched and what did not, and logs one line with the filter and the
// count (never a payload). It fails (exit 1) when nothing matched.
func runDiscard(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, f discardFlags) error {
	if err := f.filter.parse("discard", time.Now()); err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	matched := make(map[int64]bool)
	var n int64
	if f.dryRun {
		list, err := f.filter.matching(ctx, conn)
		if err != nil {
			return err
		}
		for _, r := range list {
			matched[r.ID] = true
			fmt.Fprintf(stdout, "would discard id %d: %s %s %s, last error: %s\n", r.ID, safeText(r.Source),
				safeText(r.EventID), safeText(r.EventType), oneLine(r.LastError, 100))
		}
		n = int64(len(list))
	} else {
		var err error
		if n, err = f.filter.apply(ctx, conn, "discard", discardSQL, matched); err != nil {
			return err
		}
	}

	// At info whatever INBOXD_LOG_LEVEL says: deleted rows always leave a
	// trace.
	log := newLogger(cfg, stderr).Level(zerolog.InfoLevel).With().Str("component", "admin").Str("command", "discard").Logger()
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
	if f.dryRun {
		ev.Int64("would_discard", n).Msg("discard dry run: nothing deleted")
	} else {
		ev.Int64("discarded", n).Msg("discarded rows")
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

// discardArgs are discard.sql's arguments for the one row id.
func discardArgs(status string, id int64) pgx.NamedArgs {
	return pgx.NamedArgs{"status": status, "ids": []int64{id}, "event_type": "", "source": "", "since": nil, "until": nil}
}
