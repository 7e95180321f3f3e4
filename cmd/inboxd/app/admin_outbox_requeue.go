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
	return runOutboxChange(ctx, cfg, stdout, stderr, f, changeRun{cmd: "outbox requeue", done: "requeued",
		would: "would requeue", kept: "requeued"}, "requeue", driver.RequeueOutboxDead)
}

// runOutboxDiscard deletes the dead outbox rows the filter selects (with
// --pending, the pending rows named by --id), says what matched and what
// did not, and logs one line with the filter, the status and the count
// (never a payload). It fails (exit 1) when nothing matched. Batched and
// resumable as runOutboxRequeue. A dead row holds no key back, so nothing
// else changes; once a pending row is deleted, its key's later rows are
// published without it.
func runOutboxDiscard(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, f outboxChangeFlags) error {
	return runOutboxChange(ctx, cfg, stdout, stderr, f, changeRun{cmd: "outbox discard", done: "discarded",
		would: "would discard", kept: "deleted", discardLog: "outbox rows"}, "discard",
		func(ctx context.Context, db driver.DB, df driver.FailedFilter, after, upto int64) ([]int64, error) {
			return driver.DiscardOutbox(ctx, db, f.filter.rowStatus(), df, after, upto)
		})
}

// runOutboxChange runs r, the outbox requeue or discard (verb, for the dry
// run's lines), with stmt changing the dead rows of a range.
func runOutboxChange(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, f outboxChangeFlags, r changeRun, verb string,
	stmt func(ctx context.Context, db driver.DB, f driver.FailedFilter, after, upto int64) ([]int64, error)) error {
	if err := f.filter.parse(r.cmd, time.Now(), true); err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	log := adminLog(cfg, stderr, r.cmd)

	r.noun, r.status, r.dryRun, r.filter = f.filter.rowStatus()+" outbox row", f.filter.rowStatus(), f.dryRun, &f.filter
	r.list = func(matched map[int64]bool) (int64, error) {
		return f.filter.dryRun(ctx, conn, log, stdout, verb, matched)
	}
	r.change = f.filter.changeIDs(func(after, upto int64) ([]int64, error) {
		return stmt(ctx, conn, f.filter.query(), after, upto)
	})
	return r.run(ctx, conn, log, stdout)
}

// dryRun lists the matching dead (or pending) outbox rows batch after
// batch, each as "would VERB id N: destination event_id event_type, key K,
// N attempts, last error: …", noting in matched the --id rows that
// matched, and counts them.
func (f *outboxFilter) dryRun(ctx context.Context, conn *pgx.Conn, log zerolog.Logger, stdout io.Writer,
	verb string, matched map[int64]bool) (int64, error) {
	match := func(after, upto int64) ([]driver.OutboxDeadRow, error) {
		list, err := driver.MatchOutbox(ctx, conn, f.rowStatus(), f.query(), after, upto)
		if err != nil {
			return nil, fmt.Errorf("select %s outbox rows: %w", f.rowStatus(), err)
		}
		return list, nil
	}
	return listDryRun(ctx, conn, log, stdout, f, verb, matched, match, func(r driver.OutboxDeadRow) (int64, string) {
		return r.ID, fmt.Sprintf("%s %s %s, key %s, %s, last error: %s", safeText(r.Destination), safeText(r.EventID),
			safeText(r.EventType), outboxKey(r.Key), plural(int64(r.Attempts), "attempt"), oneLine(r.LastError, 100))
	})
}
