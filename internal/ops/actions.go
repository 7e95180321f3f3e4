package ops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// batch is how many rows each batch of a bulk action takes.
const batch = driver.FailedBatch

// collector keeps the first ids an action changed, for the audit trail,
// and hands every visit to the request's Each.
type collector struct {
	req Request
	ids []int64
}

func (c *collector) visit(v Visit) {
	if len(c.ids) < maxAuditIDs {
		c.ids = append(c.ids, v.ID)
	}
	if c.req.Each != nil {
		c.req.Each(v)
	}
}

func (c *collector) changed(ids ...int64) {
	for _, id := range ids {
		c.visit(Visit{ID: id})
	}
}

// rangeEnd is the range loop's next range over the failed rows of f.
func (o *Ops) rangeEnd(f driver.FailedFilter) RangeEnd {
	return func(ctx context.Context, after int64) (int64, bool, error) {
		return driver.FailedRangeEnd(ctx, o.cfg.DB, f, after, batch)
	}
}

func (o *Ops) progress(a Action) func(total int64, batches int, last int64) {
	if o.cfg.Progress == nil {
		return nil
	}
	return func(total int64, batches int, last int64) { o.cfg.Progress(a, total, batches, last) }
}

// failedRanges runs fn over every range of the failed rows of req's
// filter; a dry run lists the matching rows of each range instead.
func (o *Ops) failedRanges(ctx context.Context, req Request, a Action, c *collector,
	fn func(f driver.FailedFilter, after, upto int64) (int64, error)) (int64, error) {
	f := req.Filter.driver()
	return EachRange(ctx, o.rangeEnd(f), func(after, upto int64) (int64, error) {
		if req.DryRun {
			rows, err := driver.MatchFailed(ctx, o.cfg.DB, f, after, upto)
			for i := range rows {
				c.visit(Visit{ID: rows[i].ID, Row: &rows[i]})
			}
			return int64(len(rows)), err
		}
		return fn(f, after, upto)
	}, o.progress(a))
}

// checkFailed refuses a request on a status other than dead or rejected.
func checkFailed(a Action, req Request) error {
	if err := req.Operator.check(); err != nil {
		return err
	}
	if !req.Filter.Status.IsFailed() {
		return fmt.Errorf("%s: dead or rejected rows only, not %q", a, req.Filter.Status)
	}
	return nil
}

// Requeue hands the dead rows of req.Filter back to the workers as fresh,
// or re-maps its rejected rows (Filter.Status rejected) by the current
// rules of their sources (Config.Remap), and wakes the workers.
func (o *Ops) Requeue(ctx context.Context, req Request) (Result, error) {
	if err := checkFailed(ActRequeue, req); err != nil {
		return Result{}, err
	}
	if req.Filter.Status == status.Rejected {
		return o.requeueRejected(ctx, req)
	}
	c := &collector{req: req}
	n, err := o.failedRanges(ctx, req, ActRequeue, c, func(f driver.FailedFilter, after, upto int64) (int64, error) {
		ids, err := driver.RequeueDead(ctx, o.cfg.DB, f, after, upto)
		c.changed(ids...)
		return int64(len(ids)), err
	})
	res := Result{Rows: n}
	if !req.DryRun {
		err = o.wake(ctx, n, err)
	}
	return o.finish(ctx, req, ActRequeue, req.Reason, c.ids, res, err)
}

// NotifyError is the error of waking the workers after rows were made due:
// the rows are due all the same (the workers find them at their next
// poll).
type NotifyError struct {
	// Rows counts the rows made due.
	Rows int64
	Err  error
}

func (e *NotifyError) Error() string {
	return fmt.Sprintf("%s made due, but waking the workers failed (they find the rows at their next poll): %v", plural(e.Rows, "row"), e.Err)
}

// Unwrap returns the notification's error.
func (e *NotifyError) Unwrap() error { return e.Err }

// wake wakes the workers of every replica once after n rows were made due
// (also by an action that stopped half-way); err is the action's error,
// returned as it is when set.
func (o *Ops) wake(ctx context.Context, n int64, err error) error {
	if n == 0 {
		return err
	}
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if nerr := driver.Notify(nctx, o.cfg.DB); nerr != nil && err == nil {
		return &NotifyError{Rows: n, Err: nerr}
	}
	return err
}

// Discard deletes the rows of req.Filter: dead or rejected rows, or
// received rows (Filter.Status received; not one reserved at ingest).
// Deleting a dead or received row unparks the row behind it on an ordered
// route, in the batch's transaction.
func (o *Ops) Discard(ctx context.Context, req Request) (Result, error) {
	if err := req.Operator.check(); err != nil {
		return Result{}, err
	}
	c := &collector{req: req}
	if req.Filter.Status == status.Received {
		n, err := o.live(ctx, req, ActDiscard, driver.LiveDiscard, c, func(f driver.FailedFilter) (int64, error) {
			return o.deleteUnpark(ctx, c, func(tx pgx.Tx) ([]driver.DeletedRow, error) {
				return driver.DiscardLive(ctx, tx, f, batch)
			}, true)
		})
		return o.finish(ctx, req, ActDiscard, req.Reason, c.ids, Result{Rows: n}, err)
	}
	if err := checkFailed(ActDiscard, req); err != nil {
		return Result{}, err
	}
	n, err := o.failedRanges(ctx, req, ActDiscard, c, func(f driver.FailedFilter, after, upto int64) (int64, error) {
		return o.deleteUnpark(ctx, c, func(tx pgx.Tx) ([]driver.DeletedRow, error) {
			return driver.DiscardFailed(ctx, tx, f, after, upto)
		}, f.Status == status.Dead) // rejected rows hold no key back
	})
	return o.finish(ctx, req, ActDiscard, req.Reason, c.ids, Result{Rows: n}, err)
}

// deleteUnpark runs del in a transaction and, when unpark, unparks the
// rows behind the deleted ones in it.
func (o *Ops) deleteUnpark(ctx context.Context, c *collector, del func(tx pgx.Tx) ([]driver.DeletedRow, error), unpark bool) (int64, error) {
	var deleted []driver.DeletedRow
	err := pgx.BeginFunc(ctx, o.cfg.DB, func(tx pgx.Tx) error {
		var err error
		if deleted, err = del(tx); err != nil || !unpark {
			return err
		}
		return driver.UnparkDeleted(ctx, tx, deleted)
	})
	if err != nil {
		return 0, err
	}
	for _, d := range deleted {
		c.changed(d.ID)
	}
	return int64(len(deleted)), nil
}

// live runs an action on live rows: a dry run lists what it would change,
// status after status, in keyset batches; else batch after batch until a
// batch changes nothing.
func (o *Ops) live(ctx context.Context, req Request, a Action, la driver.LiveAction, c *collector,
	batchFn func(f driver.FailedFilter) (int64, error)) (int64, error) {
	statuses := driver.LiveStatuses(la)
	if st := req.Filter.Status; st != "" {
		if !contains(statuses, st) {
			return 0, fmt.Errorf("%s: %s rows only, not %q", a, strings.Join(status.Strings(statuses), " or "), st)
		}
		statuses = []status.Status{st}
	}
	var total int64
	for _, st := range statuses {
		f := req.Filter.driver()
		f.Status = st
		var n int64
		var err error
		if req.DryRun {
			n, err = o.matchLive(ctx, la, st, f, c)
		} else {
			n, err = drain(ctx, func() (int64, error) { return batchFn(f) }, func(total int64, batches int) {
				if p := o.progress(a); p != nil {
					p(total, batches, 0)
				}
			})
		}
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// matchLive lists, for a dry run, the rows of st the action would change.
func (o *Ops) matchLive(ctx context.Context, la driver.LiveAction, st status.Status, f driver.FailedFilter, c *collector) (int64, error) {
	var n int64
	var at time.Time
	var id int64
	for {
		rows, err := driver.MatchLive(ctx, o.cfg.DB, la, st, f, at, id, batch)
		if err != nil {
			return n, err
		}
		for i := range rows {
			c.visit(Visit{ID: rows[i].ID, Row: &rows[i].FailedRow})
		}
		n += int64(len(rows))
		if len(rows) < batch {
			return n, nil
		}
		last := rows[len(rows)-1]
		at, id = last.OrderAt, last.ID
	}
}

func contains(list []status.Status, st status.Status) bool {
	for _, s := range list {
		if s == st {
			return true
		}
	}
	return false
}

// CancelReason is the last_error a cancelled row keeps: "cancelled by
// <operator>: <reason>".
func CancelReason(op Operator, reason string) string {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		reason = "no reason given"
	}
	return "cancelled by " + strings.TrimSpace(op.Name) + ": " + reason
}

// Cancel moves the received and processing rows of req.Filter
// (Filter.Status narrows it to one of them) to dead, with
// CancelReason(req.Operator, req.Reason) as their last_error. A processing
// row loses its lease: its worker's outcome is fenced out, and its next
// lease renewal cancels the handler. On an ordered route a cancelled row
// is a dead row: it holds its key back as a dead row does (on_dead:
// block), or the sweeper unparks the row behind it (on_dead: skip).
func (o *Ops) Cancel(ctx context.Context, req Request) (Result, error) {
	if err := req.Operator.check(); err != nil {
		return Result{}, err
	}
	reason := CancelReason(req.Operator, req.Reason)
	c := &collector{req: req}
	var st status.Status
	n, err := o.live(ctx, req, ActCancel, driver.LiveCancel, c, func(f driver.FailedFilter) (int64, error) {
		st = f.Status
		ids, err := driver.CancelLive(ctx, o.cfg.DB, st, f, reason, batch)
		c.changed(ids...)
		return int64(len(ids)), err
	})
	return o.finish(ctx, req, ActCancel, reason, c.ids, Result{Rows: n}, err)
}

// RetryNow makes the received rows of req.Filter that wait out a backoff
// due now (never a parked row: it waits for the row before it in its key),
// and wakes the workers. A dead row is retried by Requeue.
func (o *Ops) RetryNow(ctx context.Context, req Request) (Result, error) {
	if err := req.Operator.check(); err != nil {
		return Result{}, err
	}
	c := &collector{req: req}
	n, err := o.live(ctx, req, ActRetryNow, driver.LiveRetryNow, c, func(f driver.FailedFilter) (int64, error) {
		ids, err := driver.RetryNow(ctx, o.cfg.DB, f, batch)
		c.changed(ids...)
		return int64(len(ids)), err
	})
	if !req.DryRun {
		err = o.wake(ctx, n, err)
	}
	return o.finish(ctx, req, ActRetryNow, req.Reason, c.ids, Result{Rows: n}, err)
}
