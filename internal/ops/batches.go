package ops

import "context"

// RangeEnd returns the end of the next range of ids after the id after
// (ok false when none is left): see driver.FailedRangeEnd.
type RangeEnd func(ctx context.Context, after int64) (upto int64, ok bool, err error)

// EachRange calls fn with each range of ids (after, upto] that next
// returns, in id order, until none is left, and returns the sum of what fn
// returned; after each range it calls progress (when not nil) with the sum
// so far, the ranges done and the last id. It stops at the first error
// (next's or fn's), returning the sum so far: the CLI's and the console's
// one loop over the inbox's and the outbox's dead and rejected rows.
func EachRange(ctx context.Context, next RangeEnd, fn func(after, upto int64) (int64, error),
	progress func(total int64, batches int, lastID int64)) (int64, error) {
	var total, after int64
	for batches := 1; ; batches++ {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		upto, ok, err := next(ctx, after)
		if err != nil {
			return total, &RangeError{Err: err}
		}
		if !ok {
			return total, nil
		}
		n, err := fn(after, upto)
		total += n
		if err != nil {
			return total, err
		}
		after = upto
		if progress != nil {
			progress(total, batches, after)
		}
	}
}

// RangeError is the error of EachRange's next: the selection of a range
// failed (before anything of it changed).
type RangeError struct{ Err error }

func (e *RangeError) Error() string { return e.Err.Error() }

// Unwrap returns the range statement's error.
func (e *RangeError) Unwrap() error { return e.Err }

// drain calls batch until it changes nothing, and returns the sum: the
// loop of the actions on live rows, whose rows leave the filter's set as
// they change.
func drain(ctx context.Context, batch func() (int64, error), progress func(total int64, batches int)) (int64, error) {
	var total int64
	for batches := 1; ; batches++ {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := batch()
		total += n
		if err != nil || n == 0 {
			return total, err
		}
		if progress != nil {
			progress(total, batches)
		}
	}
}
