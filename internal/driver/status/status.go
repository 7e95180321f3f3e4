// Package status is the one set of inbox row statuses (the status column's
// values, docs/inbox-table.md) that inboxd's Go code uses; SQL files
// spell them out, and TestStatusesMatchTheSchema keeps the two in step.
package status

// Status is a value of the inbox table's status column.
type Status string

// The statuses, in the order of a row's life.
const (
	// Received: waiting for a worker (due at available_at).
	Received Status = "received"
	// Processing: claimed by a worker under a lease.
	Processing Status = "processing"
	// Processed: its handler succeeded (or the route ignores its type).
	Processed Status = "processed"
	// Dead: its attempts are used up, or its handler failed permanently.
	Dead Status = "dead"
	// Rejected: made from a message that could not be accepted; never
	// handed to a handler.
	Rejected Status = "rejected"
)

// All is every status, in the order of a row's life.
var All = []Status{Received, Processing, Processed, Dead, Rejected}

// Live is every status but processed: the rows the gauges count.
var Live = []Status{Received, Processing, Dead, Rejected}

// Failed are the statuses an operator deals with by hand (list, requeue,
// discard).
var Failed = []Status{Dead, Rejected}

// String returns the column value.
func (s Status) String() string { return string(s) }

// IsFailed reports whether s is dead or rejected.
func (s Status) IsFailed() bool { return s == Dead || s == Rejected }

// Strings returns ss as plain strings (for SQL arrays and metric labels).
func Strings(ss []Status) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}
