package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// DB is what the operations run on: a *pgxpool.Pool or a *pgx.Conn.
type DB interface {
	driver.DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Operator is who acts, and from where.
type Operator struct {
	// Name is the operator's name: a console user, or the CLI's --by (or
	// INBOXD_OPERATOR, or $USER@host). Never empty.
	Name string
	// From says where the action comes from: "cli", "console 192.0.2.1".
	From string
}

// ErrNoOperator is returned by every action without an operator's name.
var ErrNoOperator = errors.New("say who acts: an operator's name is required (the CLI: --by or INBOXD_OPERATOR)")

// check refuses an operator without a name, or with the name of nobody.
func (o Operator) check() error {
	name := strings.TrimSpace(o.Name)
	if name == "" || strings.HasPrefix(name, "unknown@") || name == "unknown" {
		return ErrNoOperator
	}
	return nil
}

// Action names what an operator did, as the audit trail records it.
type Action string

// The actions.
const (
	ActRequeue  Action = "requeue"
	ActDiscard  Action = "discard"
	ActCancel   Action = "cancel"
	ActRetryNow Action = "retry_now"
	ActPause    Action = "pause"
	ActResume   Action = "resume"
	// ActRateChange is a rate override set or cleared (SetRate,
	// ClearRate), ActBreakerReset a breaker reset: an admin's.
	ActRateChange   Action = "rate_change"
	ActBreakerReset Action = "breaker_reset"
	ActSignIn       Action = "sign_in"
	ActSignOut      Action = "sign_out"
)

// Filter selects the rows of an action: a selection (IDs) or a filter of
// one status; its conditions combine with AND.
type Filter struct {
	// Status is the status of the rows acted on: dead or rejected
	// (requeue, discard), received or processing (cancel: both when "";
	// retry now and discard: received).
	Status status.Status
	// IDs, when not nil, are the only rows that count: a selection.
	IDs []int64
	// EventType (the route's event type), Source and Error ("" = any)
	// narrow it; Error must be part of last_error, in any case.
	EventType, Source, Error string
	// Key, when not nil, must be the row's key.
	Key []byte
	// Since and Until bound the row's time: when it failed (dead,
	// rejected), was received (received, processing) or processed.
	Since, Until *time.Time
}

// driver is f as the driver's statements take it.
func (f Filter) driver() driver.FailedFilter {
	return driver.FailedFilter{Status: f.Status, IDs: f.IDs, EventType: f.EventType, Source: f.Source,
		Since: f.Since, Until: f.Until, Error: f.Error, Key: f.Key}
}

// any says whether f selects something narrower than a whole status.
func (f Filter) any() bool {
	return f.IDs != nil || f.EventType != "" || f.Source != "" || f.Error != "" || f.Key != nil || f.Since != nil || f.Until != nil
}

// MarshalJSON renders f as the audit trail records it: only the
// conditions given.
func (f Filter) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	if f.Status != "" {
		m["status"] = f.Status
	}
	if f.IDs != nil {
		m["ids"] = f.IDs
	}
	for k, v := range map[string]string{"event_type": f.EventType, "source": f.Source, "error": f.Error} {
		if v != "" {
			m[k] = v
		}
	}
	if f.Key != nil {
		m["key"] = string(f.Key)
	}
	if f.Since != nil {
		m["since"] = f.Since.UTC()
	}
	if f.Until != nil {
		m["until"] = f.Until.UTC()
	}
	return json.Marshal(m)
}

// Request is one action on rows.
type Request struct {
	Operator Operator
	Filter   Filter
	// DryRun counts (and, through Each, lists) what the action would
	// change, and changes nothing.
	DryRun bool
	// Reason is why (cancel: part of the rows' last_error).
	Reason string
	// DropDuplicates, for a requeue of rejected rows: delete a rejected row
	// whose event is already in the inbox.
	DropDuplicates bool
	// Each, when not nil, is called for every row the action changed (or,
	// in a dry run, would change), in batches' order.
	Each func(Visit)
}

// Visit is one row an action changed, or would.
type Visit struct {
	ID int64
	// Row is the row as a dry run read it (nil when the action changed it:
	// only its id is known).
	Row *driver.FailedRow
	// Outcome and Line are a re-mapped rejected row's: what became of it,
	// and a line for the operator.
	Outcome RemapOutcome
	Line    string
}

// Result is what an action did.
type Result struct {
	Action Action
	DryRun bool
	// Rows counts the rows changed, or matched by a dry run (for a requeue
	// of rejected rows: those requeued, or that would be).
	Rows int64
	// Listed counts the rows a requeue of rejected rows looked at;
	// Outcomes what became of them.
	Listed   int64
	Outcomes map[RemapOutcome]int64
	// AuditID is the action's entry in the audit trail.
	AuditID int64
}

// Config is what New needs.
type Config struct {
	// DB is the inbox's database.
	DB DB
	// Remap maps a stored rejected row again by the current rules of its
	// source (nil: requeue of rejected rows is refused).
	Remap Remapper
	// Routes returns the routes the operator's files name (the routes
	// file's entries: their event types, rate limits and breakers); nil:
	// only the database's are known.
	Routes func() ([]handlers.RouteConfig, error)
	// Breakers returns the state of each route's circuit breaker in the
	// replica the operations run in ("closed", "open", "half-open", by
	// driver route name); nil: none is known (the CLI, inboxd ui).
	Breakers func() map[string]string
	// Lease is the workers' lease (INBOXD_LEASE): the processing list reads
	// the rows reserved at ingest whose lease ends within it (zero: a
	// minute).
	Lease time.Duration
	// MaxAttempts returns the attempt budget of an event type's route (nil:
	// unknown, lists show none).
	MaxAttempts func(eventType string) int
	// Progress, when not nil, is called after each batch of a bulk action
	// with the rows done so far, the batches and the last id.
	Progress func(a Action, rows int64, batches int, lastID int64)
	// Logger takes a line per action (who, what, the filter, how many).
	Logger zerolog.Logger
}

// Ops runs the operator's actions and lists on one database.
type Ops struct {
	cfg Config
	log zerolog.Logger
}

// New returns the operations of cfg.
func New(cfg Config) *Ops {
	return &Ops{cfg: cfg, log: cfg.Logger.With().Str("component", "ops").Logger()}
}

// maxAuditIDs bounds the row ids an audit entry keeps: a bulk action keeps
// its filter and count, and its first ids.
const maxAuditIDs = 100

// record appends the audit entry of an action (also of one that failed,
// with its error) and logs it; its id lands in res.
func (o *Ops) record(ctx context.Context, req Request, a Action, detail string, ids []int64, res *Result, actErr error) error {
	filter, err := json.Marshal(req.Filter)
	if err != nil {
		return err
	}
	if len(ids) > maxAuditIDs {
		ids = ids[:maxAuditIDs]
	}
	e := driver.AuditEntry{Operator: req.Operator.Name, Origin: req.Operator.From, Action: string(a), DryRun: req.DryRun,
		Filter: string(filter), RowIDs: ids, RowCount: res.Rows, Detail: detail}
	if actErr != nil {
		e.Error = actErr.Error()
	}
	ev := o.log.Info()
	if actErr != nil {
		ev = o.log.Error().Err(actErr)
	}
	ev.Str("operator", e.Operator).Str("origin", e.Origin).Str("action", e.Action).Bool("dry_run", e.DryRun).
		RawJSON("filter", filter).Int64("rows", e.RowCount).Str("detail", detail).Msg("operator action")
	// The entry is written even when the action's context ended: what was
	// done must leave its trace.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	id, _, err := driver.InsertAudit(wctx, o.cfg.DB, e)
	res.AuditID = id
	return err
}

// Record appends an entry that is not an action on rows (sign-in,
// sign-out, a rate change) to the audit trail: what, with detail.
func (o *Ops) Record(ctx context.Context, op Operator, a Action, detail string) error {
	if err := op.check(); err != nil {
		return err
	}
	var res Result
	return o.record(ctx, Request{Operator: op}, a, detail, nil, &res, nil)
}

// AuditQuery selects a page of the audit trail.
type AuditQuery = driver.AuditQuery

// AuditEntry is an entry of the audit trail.
type AuditEntry = driver.AuditEntry

// Audit returns a page of the audit trail, newest first; the next page
// starts Before the last entry's ID.
func (o *Ops) Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	if q.Limit < 1 {
		q.Limit = 50
	}
	return driver.ListAudit(ctx, o.cfg.DB, q)
}

// finish records the action and joins its error with the record's.
func (o *Ops) finish(ctx context.Context, req Request, a Action, detail string, ids []int64, res Result, err error) (Result, error) {
	res.Action, res.DryRun = a, req.DryRun
	if rerr := o.record(ctx, req, a, detail, ids, &res, err); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return res, err
}

// plural is "1 row", "n rows".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
