package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// RemapOutcome is what became of one rejected row a requeue re-mapped.
type RemapOutcome int

// The outcomes.
const (
	// OutcomeRequeued: it maps to a storable event now and was (or would
	// be) handed to the workers under its new event id.
	OutcomeRequeued RemapOutcome = iota
	// OutcomeDuplicate: its event is in the inbox already; it stays
	// rejected.
	OutcomeDuplicate
	// OutcomeDropped: its event is in the inbox already; it was deleted
	// (Request.DropDuplicates).
	OutcomeDropped
	// OutcomeStillRejected: the current rules reject it still.
	OutcomeStillRejected
	// OutcomeOversize: part of its message was not stored; the event must
	// be produced again.
	OutcomeOversize
	// OutcomeGone: it is no longer rejected (it changed meanwhile).
	OutcomeGone
)

// Mapped is what a Remapper makes of a stored rejected row.
type Mapped struct {
	// EventID and EventType are what the row maps to now.
	EventID, EventType string
	// Refused says it does not map to a storable event: Outcome says why
	// (OutcomeStillRejected or OutcomeOversize), Line in a line for the
	// operator.
	Refused bool
	Outcome RemapOutcome
	Line    string
}

// Remapper maps a stored rejected row again, by the current rules of the
// source it came from: the one place those rules are called from ops (the
// CLI and the daemon wire it to the sources' own remapping rule).
type Remapper func(r driver.RejectedRow) Mapped

// requeueRejected re-maps every matching rejected row, one row at a time
// (a row that clashes must not stop the others), reading them a range at a
// time.
func (o *Ops) requeueRejected(ctx context.Context, req Request) (Result, error) {
	if o.cfg.Remap == nil {
		return Result{}, errors.New("requeue: this process does not re-map rejected rows (no mapping rules)")
	}
	c := &collector{req: req}
	res := Result{Outcomes: map[RemapOutcome]int64{}}
	f := req.Filter.driver()
	listed, err := EachRange(ctx, o.rangeEnd(f), func(after, upto int64) (int64, error) {
		rows, err := driver.MatchFailed(ctx, o.cfg.DB, f, after, upto)
		if err != nil {
			return 0, err
		}
		for i, r := range rows {
			outcome, line, err := o.remapOne(ctx, r.ID, req.DryRun, req.DropDuplicates)
			if err != nil {
				return int64(i), err
			}
			res.Outcomes[outcome]++
			if outcome == OutcomeRequeued {
				res.Rows++
			}
			c.visit(Visit{ID: r.ID, Row: &rows[i], Outcome: outcome, Line: line})
		}
		return int64(len(rows)), nil
	}, o.progress(ActRequeue))
	res.Listed = listed
	if !req.DryRun {
		err = o.wake(ctx, res.Outcomes[OutcomeRequeued], err)
	}
	return o.finish(ctx, req, ActRequeue, req.Reason, c.ids, res, err)
}

// remapOne re-maps the rejected row id and, unless dryRun, hands it to the
// workers under its new event id. It returns the outcome and a line for
// the operator.
func (o *Ops) remapOne(ctx context.Context, id int64, dryRun, dropDuplicates bool) (RemapOutcome, string, error) {
	db := o.cfg.DB
	s, ok, err := driver.ReadRejected(ctx, db, id)
	if err != nil {
		return 0, "", fmt.Errorf("read rejected row %d: %w", id, err)
	}
	if !ok {
		return OutcomeGone, "no longer rejected (changed while this command ran)", nil
	}
	row := o.cfg.Remap(s) // by the rules of the row's own source
	if row.Refused {
		return row.Outcome, row.Line, nil
	}
	target := fmt.Sprintf("event id %s, type %s", SafeText(row.EventID), SafeText(row.EventType))
	owner := func() (string, error) {
		ownerID, ownerStatus, ok, err := driver.EventOwner(ctx, db, s.Source, row.EventID)
		switch {
		case err != nil:
			return "", fmt.Errorf("look up %s: %w", target, err)
		case !ok:
			return "", nil
		}
		return fmt.Sprintf("row %d (%s)", ownerID, ownerStatus), nil
	}
	if dryRun {
		dup, err := owner()
		switch {
		case err != nil:
			return 0, "", err
		case dup != "" && dropDuplicates:
			return OutcomeDropped, fmt.Sprintf("maps to %s, which %s already holds: would be deleted", target, dup), nil
		case dup != "":
			return OutcomeDuplicate, fmt.Sprintf("maps to %s, which %s already holds: would stay rejected (--drop-duplicates deletes it)", target, dup), nil
		}
		return OutcomeRequeued, "would requeue as " + target, nil
	}
	requeued, err := driver.RequeueRejected(ctx, db, id, row.EventID, row.EventType)
	pgErr, refused := driver.AsDataError(err)
	switch {
	case errors.Is(err, driver.ErrEventTaken): // the event arrived again
		dup, err := owner()
		if err != nil {
			return 0, "", err
		}
		if dup == "" {
			dup = "another row"
		}
		if !dropDuplicates {
			return OutcomeDuplicate, fmt.Sprintf("maps to %s, which %s already holds: left rejected (--drop-duplicates deletes it)", target, dup), nil
		}
		del, err := driver.DiscardFailed(ctx, db, driver.FailedFilter{Status: status.Rejected, IDs: []int64{id}}, id-1, id)
		if err != nil {
			return 0, "", fmt.Errorf("delete duplicate rejected row %d: %w", id, err)
		}
		if len(del) == 0 {
			return OutcomeGone, "no longer rejected (changed while this command ran)", nil
		}
		return OutcomeDropped, fmt.Sprintf("maps to %s, which %s already holds: deleted", target, dup), nil
	case refused:
		// A data error (driver.AsDataError, as for ingest's refused rows):
		// this row stays, the others go on.
		return OutcomeStillRejected, fmt.Sprintf("still rejected: the database refuses %s: %s (SQLSTATE %s)",
			target, pgErr.Message, pgErr.Code), nil
	case err != nil:
		return 0, "", fmt.Errorf("rejected row %d: %w", id, err)
	case !requeued:
		return OutcomeGone, "no longer rejected (changed while this command ran)", nil
	}
	return OutcomeRequeued, "requeued as " + target, nil
}
