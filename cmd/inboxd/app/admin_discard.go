package app

import (
	"context"
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
	return changeRun{cmd: "discard", noun: f.filter.status + " row", done: "discarded", would: "would discard", kept: "deleted",
		dryRun: f.dryRun, filter: &f.filter, discardLog: "rows", status: f.filter.status,
		list: func(matched map[int64]bool) (int64, error) {
			return f.filter.dryRun(ctx, conn, log, stdout, "discard", nil, matched)
		},
		change: func(after, upto int64, matched map[int64]bool) (int64, error) {
			return f.filter.discardRange(ctx, conn, after, upto, matched)
		},
	}.run(ctx, conn, log, stdout)
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
