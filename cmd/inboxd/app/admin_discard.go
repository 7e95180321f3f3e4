package app

import (
	"context"
	"io"
	"time"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/ops"
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
func runDiscard(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, environ []string, f discardFlags) error {
	if err := f.filter.parse("discard", time.Now()); err != nil {
		return err
	}
	if err := f.filter.resolveOperator("discard", cfg, environ); err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	log := adminLog(cfg, stderr, "discard")
	o := newOps(conn, log, nil, nil)
	return changeRun{cmd: "discard", noun: f.filter.status + " row", done: "discarded", would: "would discard", kept: "deleted",
		dryRun: f.dryRun, filter: &f.filter, discardLog: "rows", status: f.filter.status,
		all: func(matched map[int64]bool) (int64, error) {
			res, err := o.Discard(ctx, ops.Request{Operator: f.filter.operator, Filter: f.filter.opsFilter(), DryRun: f.dryRun,
				Each: f.filter.visitor(stdout, "discard", matched, nil)})
			return res.Rows, err
		},
	}.run(ctx, conn, log, stdout)
}
