package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/ops"
)

// failedBatch is how many dead or rejected rows requeue and discard take at
// a time (driver.FailedBatch says why).
const failedBatch = driver.FailedBatch

// A long requeue or discard says how far it got on stderr: a line after
// every progressRows rows, or progressEvery, whichever comes first.
const (
	progressRows  = 50_000
	progressEvery = 5 * time.Second
)

// failedFilter selects dead or rejected rows for requeue and discard. Its
// conditions combine with AND; --all selects every row of the status when
// no other condition is given.
type failedFilter struct {
	rowSelection
	status    string
	eventType string
	source    string
	errorText string
	key       string
	all       bool
	// by is --by; operator is who acts, resolved by parse.
	by       string
	operator ops.Operator
}

// rowSelection is what the inbox's and the outbox's filters (failedFilter,
// outboxFilter) share: --id, the rows named and which of them matched, and
// the --since/--until bounds.
type rowSelection struct {
	ids   string
	since string
	until string

	// Parsed by parseSelection.
	idList     []int64
	sinceTime  *time.Time
	untilTime  *time.Time
	parsedFrom string // the command name, for messages
}

// condition is one of a filter's own conditions given as text, as
// describe shows it (--flag "value") and the discard log records it
// (logKey); "" is none.
type condition struct {
	flag, logKey, value string
}

// parseSelection resolves --id, --since and --until for the command cmd;
// now anchors durations.
func (s *rowSelection) parseSelection(cmd string, now time.Time) error {
	s.parsedFrom = cmd
	var err error
	if s.idList, err = parseIDs(cmd, s.ids); err != nil {
		return err
	}
	if s.sinceTime, err = parseSince(s.since, now); err != nil {
		return usageError{fmt.Errorf("%s: --since: %w", cmd, err)}
	}
	if s.untilTime, err = parseSince(s.until, now); err != nil {
		return usageError{fmt.Errorf("%s: --until: %w", cmd, err)}
	}
	if s.sinceTime != nil && s.untilTime != nil && !s.sinceTime.Before(*s.untilTime) {
		return usageError{fmt.Errorf("%s: --since (%s) must be before --until (%s)", cmd,
			s.sinceTime.Format(time.RFC3339), s.untilTime.Format(time.RFC3339))}
	}
	return nil
}

// describeWith renders the filter for messages and logs: --id, the
// filter's own conditions own, --since and --until, then more; "--all"
// when there is none.
func (s *rowSelection) describeWith(own, more []condition) string {
	var parts []string
	if len(s.idList) > 0 {
		parts = append(parts, "--id "+s.ids)
	}
	quoted := func(cs []condition) {
		for _, c := range cs {
			if c.value != "" {
				parts = append(parts, "--"+c.flag+" "+strconv.Quote(c.value))
			}
		}
	}
	quoted(own)
	if s.sinceTime != nil {
		parts = append(parts, "--since "+s.sinceTime.UTC().Format(time.RFC3339))
	}
	if s.untilTime != nil {
		parts = append(parts, "--until "+s.untilTime.UTC().Format(time.RFC3339))
	}
	quoted(more)
	if len(parts) == 0 {
		return "--all"
	}
	return strings.Join(parts, " ")
}

// logWith adds the filter's fields to ev in describeWith's order.
func (s *rowSelection) logWith(ev *zerolog.Event, own, more []condition) *zerolog.Event {
	if s.idList != nil {
		ev = ev.Ints64("ids", s.idList)
	}
	fields := func(cs []condition) {
		for _, c := range cs {
			if c.value != "" {
				ev = ev.Str(c.logKey, c.value)
			}
		}
	}
	fields(own)
	if s.sinceTime != nil {
		ev = ev.Time("since", *s.sinceTime)
	}
	if s.untilTime != nil {
		ev = ev.Time("until", *s.untilTime)
	}
	fields(more)
	return ev
}

// mark notes, with --id, each of ids in matched.
func (s *rowSelection) mark(matched map[int64]bool, ids ...int64) {
	if s.idList == nil {
		return
	}
	for _, id := range ids {
		matched[id] = true
	}
}

// selection returns s, so that code that takes any filter
// (selectingFilter) reaches what they share.
func (s *rowSelection) selection() *rowSelection { return s }

// outside says why the time t of a row (did: "it failed") is not within
// --since and --until; nil when it is.
func (s *rowSelection) outside(t time.Time, did string) []string {
	var not []string
	if s.sinceTime != nil && t.Before(*s.sinceTime) {
		not = append(not, did+" before --since ("+t.UTC().Format(time.RFC3339)+")")
	}
	if s.untilTime != nil && !t.Before(*s.untilTime) {
		not = append(not, did+" at or after --until ("+t.UTC().Format(time.RFC3339)+")")
	}
	return not
}

// explainUnmatched explains, for every id given with --id that is not in
// matched, why the filter did not select it, in the order the ids were
// given: "id 9999: no such row" when lookup does not return it, else "id
// N: " and what why says of the row (idOf is its id).
func explainUnmatched[R any](s *rowSelection, matched map[int64]bool, lookup func(ids []int64) ([]R, error),
	idOf func(R) int64, why func(R) string) ([]string, error) {
	var missing []int64
	for _, id := range s.idList {
		if !matched[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	found, err := lookup(missing)
	if err != nil {
		return nil, fmt.Errorf("%s: look up ids: %w", s.parsedFrom, err)
	}
	byID := make(map[int64]R, len(found))
	for _, r := range found {
		byID[idOf(r)] = r
	}
	out := make([]string, 0, len(missing))
	for _, id := range missing {
		text := "no such row"
		if r, ok := byID[id]; ok {
			text = why(r)
		}
		out = append(out, fmt.Sprintf("id %d: %s", id, text))
	}
	return out, nil
}

// mismatch says, when want is given and got is not it, that the row's
// what is got, not want; nil otherwise.
func mismatch(what, got, want string) []string {
	if want == "" || got == want {
		return nil
	}
	return []string{fmt.Sprintf("its %s is %q, not %q", what, got, want)}
}

// butNot is why a row of the status st the filter reads was not selected:
// "st, but " and the conditions it fails (not), or, when it fails none,
// that it changed while the command ran.
func butNot(st string, not []string) string {
	if len(not) == 0 {
		not = append(not, "it changed while this command ran")
	}
	return st + ", but " + strings.Join(not, " and ")
}

// register adds the filter's flags to fs.
func (f *failedFilter) register(fs *flag.FlagSet, verb string) {
	fs.StringVar(&f.status, "status", string(status.Dead), "`status` of the rows to "+verb+": dead or rejected")
	fs.StringVar(&f.ids, "id", "", "only the rows with these `IDS` (comma-separated)")
	registerConditions(fs, &f.eventType, &f.source, &f.errorText, &f.key)
	fs.StringVar(&f.since, "since", "", "only rows that failed (updated_at) at or after `TIME`: RFC 3339, or a Go duration meaning that long ago (90m, 24h)")
	fs.StringVar(&f.until, "until", "", "only rows that failed (updated_at) before `TIME`, as --since")
	fs.BoolVar(&f.all, "all", false, "every row of the status (the other filters narrow it)")
	fs.StringVar(&f.by, "by", "", byUsage)
}

// sourceUsage is --source's help: a source is where the row came from,
// whatever the broker.
const sourceUsage = "only rows of this `source`: the Kafka topic, RabbitMQ queue, NATS stream or webhook source they came from (as inboxd dead shows it)"

// byUsage is --by's help.
const byUsage = "who acts, for the audit trail (`NAME`; default INBOXD_OPERATOR, else $USER@host)"

// parse checks the flags and resolves ids and times; now anchors durations.
func (f *failedFilter) parse(cmd string, now time.Time) error {
	if !status.Status(f.status).IsFailed() {
		return usageError{fmt.Errorf("%s: --status must be dead or rejected, got %q", cmd, f.status)}
	}
	if f.ids == "" && f.eventType == "" && f.source == "" && f.errorText == "" && f.key == "" && f.since == "" && f.until == "" && !f.all {
		return usageError{fmt.Errorf("%s: say which %s rows: --id 1,2,3, --type T, --source S, --error TEXT, --key K, --since/--until, or --all", cmd, f.status)}
	}
	return f.parseSelection(cmd, now)
}

// resolveOperator sets f.operator from --by, cfg's INBOXD_OPERATOR or the
// environment.
func (f *failedFilter) resolveOperator(cmd string, cfg config.Config, environ []string) error {
	op, err := cliOperator(cmd, f.by, cfg, environ)
	f.operator = op
	return err
}

// opsFilter is the filter as ops takes it.
func (f *failedFilter) opsFilter() ops.Filter {
	q := f.query()
	return ops.Filter{Status: q.Status, IDs: q.IDs, EventType: q.EventType, Source: q.Source, Error: q.Error, Key: q.Key,
		Since: q.Since, Until: q.Until}
}

// parseIDs reads --id's comma-separated row ids, each once; "" is nil (any
// row).
func parseIDs(cmd, ids string) ([]int64, error) {
	if ids == "" {
		return nil, nil
	}
	var list []int64
	for _, s := range strings.Split(ids, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || id < 1 {
			return nil, usageError{fmt.Errorf("%s: --id: %q is not a row id", cmd, s)}
		}
		if !slices.Contains(list, id) {
			list = append(list, id)
		}
	}
	return list, nil
}

// parseSince reads an RFC 3339 time, or a duration meaning that long before
// now; "" is no bound.
func parseSince(s string, now time.Time) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return &t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf("%q is neither an RFC 3339 time (2024-05-01T12:00:00Z) nor a duration (90m, 24h)", s)
	}
	if d < 0 {
		return nil, fmt.Errorf("%q: a duration means that long ago and must not be negative", s)
	}
	t := now.Add(-d)
	return &t, nil
}

// query is the filter as the driver takes it.
func (f *failedFilter) query() driver.FailedFilter {
	return driver.FailedFilter{
		Status:    status.Status(f.status),
		IDs:       f.idList, // nil: any
		EventType: f.eventType,
		Source:    f.source,
		Since:     f.sinceTime,
		Until:     f.untilTime,
		Error:     f.errorText,
		Key:       keyBytes(f.key),
	}
}

// keyBytes is --key's value as the key column's bytes; nil when not given.
func keyBytes(k string) []byte {
	if k == "" {
		return nil
	}
	return []byte(k)
}

// conditions are the filter's own conditions, for describeWith and
// logWith.
func (f *failedFilter) conditions() (own, more []condition) {
	return []condition{{"type", "event_type", f.eventType}, {"source", "source", f.source},
		{"error", "error_text", f.errorText}, {"key", "key", f.key}}, nil
}

// describe renders the filter for messages and logs.
func (f *failedFilter) describe() string { return f.describeWith(f.conditions()) }

// logFields adds the filter's fields to ev.
func (f *failedFilter) logFields(ev *zerolog.Event) *zerolog.Event {
	own, more := f.conditions()
	return f.logWith(ev, own, more)
}

// failedRow is one dead or rejected row, without its payload, as the dead
// command's --json prints it (a driver.FailedRow).
type failedRow struct {
	ID        int64         `json:"id"`
	Status    status.Status `json:"status"`
	Source    string        `json:"source"`
	EventID   string        `json:"event_id"`
	EventType string        `json:"event_type"`
	Attempts  int           `json:"attempts"`
	UpdatedAt time.Time     `json:"updated_at"`
	LastError string        `json:"last_error"`
}

// adminLog is the log of the commands that change rows: at info whatever
// INBOXD_LOG_LEVEL says, so that deleted rows and a long run's progress
// always leave a trace.
func adminLog(cfg config.Config, stderr io.Writer, command string) zerolog.Logger {
	return newLogger(cfg, stderr).Level(zerolog.InfoLevel).With().Str("component", "admin").Str("command", command).Logger()
}

// eachRange calls fn with each range of ids (after, upto] of the status's
// rows, failedBatch rows of the status at a time, in id order, until none
// is left, and returns the sum of what fn returned. It logs progress to
// log as it goes. When fn or the context fails, the error says that the
// rows counted so far stay kept (so, "requeued"), and that running the
// command again does the rest.
func (f *failedFilter) eachRange(ctx context.Context, conn *pgx.Conn, log zerolog.Logger, kept string,
	fn func(after, upto int64) (int64, error)) (int64, error) {
	return eachBatch(f.parsedFrom, f.status, log, kept, func(after int64) (int64, bool, error) {
		return driver.FailedRangeEnd(ctx, conn, f.query(), after, failedBatch)
	}, fn)
}

// eachBatch is the loop of eachRange, for any table: rangeEnd returns the
// end of the next range of failedBatch rows of the status st after an id
// (ok false when none is left), fn does a range. cmd names the command in
// errors and progress lines.
func eachBatch(cmd, st string, log zerolog.Logger, kept string,
	rangeEnd func(after int64) (upto int64, ok bool, err error),
	fn func(after, upto int64) (int64, error)) (int64, error) {
	var reported int64
	lastReport := time.Now()
	total, err := ops.EachRange(context.Background(), func(_ context.Context, after int64) (int64, bool, error) { return rangeEnd(after) }, fn,
		func(total int64, batches int, last int64) {
			if total-reported >= progressRows || time.Since(lastReport) >= progressEvery {
				log.Info().Str("status", st).Int64("rows", total).Int("batches", batches).Int64("last_id", last).Msg(cmd + " progress")
				reported, lastReport = total, time.Now()
			}
		})
	var rangeErr *ops.RangeError
	if errors.As(err, &rangeErr) {
		err = fmt.Errorf("select the next %d %s rows: %w", failedBatch, st, rangeErr.Err)
	}
	if err != nil {
		return total, stoppedError(cmd, total, kept, err)
	}
	return total, nil
}

// stoppedError is the error of a command that stopped after changing
// total rows, which stay kept ("requeued"; "" when a dry run changed
// nothing): running it again does the rest.
func stoppedError(cmd string, total int64, kept string, err error) error {
	if total == 0 || kept == "" {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	return fmt.Errorf("%s: stopped after %s, which stay %s; run the command again for the rest: %w",
		cmd, plural(total, "row"), kept, err)
}

// newOps returns the operations on conn, with the CLI's progress lines on
// log every progressRows rows or progressEvery.
func newOps(conn *pgx.Conn, log zerolog.Logger, remap ops.Remapper, routes func() ([]handlers.RouteConfig, error)) *ops.Ops {
	var reported int64
	lastReport := time.Now()
	// The commands log their own lines; ops writes the audit trail.
	return ops.New(ops.Config{DB: conn, Remap: remap, Routes: routes,
		Progress: func(a ops.Action, total int64, batches int, last int64) {
			if total-reported >= progressRows || time.Since(lastReport) >= progressEvery {
				log.Info().Int64("rows", total).Int("batches", batches).Int64("last_id", last).Msg(string(a) + " progress")
				reported, lastReport = total, time.Now()
			}
		}})
}

// dryRun lists the matching rows batch after batch, each as "would VERB id
// N: source event_id event_type, DETAIL, last error: …" (detail may add to
// the line), noting in matched the --id rows that matched, and counts them.
func (f *failedFilter) dryRun(ctx context.Context, conn *pgx.Conn, log zerolog.Logger, stdout io.Writer,
	verb string, detail func(driver.FailedRow) string, matched map[int64]bool) (int64, error) {
	match := func(after, upto int64) ([]driver.FailedRow, error) { return f.matching(ctx, conn, after, upto) }
	return listDryRun(ctx, conn, log, stdout, f, verb, matched, match, func(r driver.FailedRow) (int64, string) {
		more := ""
		if detail != nil {
			more = ", " + detail(r)
		}
		return r.ID, fmt.Sprintf("%s %s %s%s, last error: %s", safeText(r.Source),
			safeText(r.EventID), safeText(r.EventType), more, oneLine(r.LastError, 100))
	})
}

// visitor is an ops action's Each for the CLI: it notes the --id rows in
// matched and, for a dry run's rows, prints "would VERB id N: source
// event_id event_type, DETAIL, last error: …" (detail may add to the line).
func (f *failedFilter) visitor(stdout io.Writer, verb string, matched map[int64]bool, detail func(driver.FailedRow) string) func(ops.Visit) {
	return func(v ops.Visit) {
		f.mark(matched, v.ID)
		if v.Row == nil {
			return
		}
		r := *v.Row
		more := ""
		if detail != nil {
			more = ", " + detail(r)
		}
		fmt.Fprintf(stdout, "would %s id %d: %s %s %s%s, last error: %s\n", verb, r.ID, safeText(r.Source),
			safeText(r.EventID), safeText(r.EventType), more, oneLine(r.LastError, 100))
	}
}

// listDryRun lists, for a dry run, the rows match returns in each range of
// f, a line each, "would VERB id N: " and what line says of the row (line
// also returns its id), noting the --id ones in matched, and counts them.
func listDryRun[R any](ctx context.Context, conn *pgx.Conn, log zerolog.Logger, stdout io.Writer, f selectingFilter,
	verb string, matched map[int64]bool, match func(after, upto int64) ([]R, error), line func(R) (int64, string)) (int64, error) {
	return f.eachRange(ctx, conn, log, "", func(after, upto int64) (int64, error) {
		list, err := match(after, upto)
		if err != nil {
			return 0, err
		}
		for _, r := range list {
			id, text := line(r)
			f.selection().mark(matched, id)
			fmt.Fprintf(stdout, "would %s id %d: %s\n", verb, id, text)
		}
		return int64(len(list)), nil
	})
}

// matching returns the rows the filter selects now among the ids
// (after, upto].
func (f *failedFilter) matching(ctx context.Context, conn *pgx.Conn, after, upto int64) ([]driver.FailedRow, error) {
	list, err := driver.MatchFailed(ctx, conn, f.query(), after, upto)
	if err != nil {
		return nil, fmt.Errorf("select %s rows: %w", f.status, err)
	}
	return list, nil
}

// unmatched explains, for every id given with --id that is not in matched,
// why the filter did not select it, in the order the ids were given:
// "id 1: processed, not dead", "id 9999: no such row".
func (f *failedFilter) unmatched(ctx context.Context, conn *pgx.Conn, matched map[int64]bool) ([]string, error) {
	lookup := func(ids []int64) ([]driver.RowState, error) { return driver.RowStates(ctx, conn, ids) }
	return explainUnmatched(&f.rowSelection, matched, lookup, func(r driver.RowState) int64 { return r.ID },
		func(r driver.RowState) string {
			if string(r.Status) != f.status {
				why := fmt.Sprintf("%s, not %s", r.Status, f.status)
				if r.Status.IsFailed() {
					why += fmt.Sprintf(" (use --status %s)", r.Status)
				}
				return why
			}
			not := append(mismatch("type", r.EventType, f.eventType), mismatch("source", r.Source, f.source)...)
			return butNot(string(r.Status), append(not, f.outside(r.UpdatedAt, "it failed")...))
		})
}

// errNothingMatched is returned (exit code 1) by requeue and discard when
// no row matched.
var errNothingMatched = errors.New("nothing matched")

// plural returns "1 row" or "n rows".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.FormatInt(n, 10) + " " + word + "s"
}
