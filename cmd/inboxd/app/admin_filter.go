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
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// failedBatch is how many dead or rejected rows requeue and discard take at
// a time: each batch is a range of ids (see sql/failed_range.sql) changed by
// a short statement (or transaction) of its own, so that no statement grows
// with the backlog (a million rows in one UPDATE outlasted
// INBOXD_STATEMENT_TIMEOUT and requeued nothing), and what a run did stays
// done when it stops: running it again picks up what is left. A batch must
// fit well within the smallest INBOXD_STATEMENT_TIMEOUT (1 s) on a busy
// server: 5,000 dead rows locked and requeued took 50 to 320 ms on the
// loaded 2-core test machine, 1,000 take a fifth of that.
const failedBatch = 1000

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
	status    string
	ids       string
	eventType string
	source    string
	since     string
	until     string
	all       bool

	// Parsed by parse.
	idList     []int64
	sinceTime  *time.Time
	untilTime  *time.Time
	parsedFrom string // the command name, for messages
}

// register adds the filter's flags to fs.
func (f *failedFilter) register(fs *flag.FlagSet, verb string) {
	fs.StringVar(&f.status, "status", string(status.Dead), "`status` of the rows to "+verb+": dead or rejected")
	fs.StringVar(&f.ids, "id", "", "only the rows with these `IDS` (comma-separated)")
	fs.StringVar(&f.eventType, "type", "", "only rows of this event `type`")
	fs.StringVar(&f.source, "source", "", "only rows of this `source` (the Kafka topic for ingested rows)")
	fs.StringVar(&f.since, "since", "", "only rows that failed (updated_at) at or after `TIME`: RFC 3339, or a Go duration meaning that long ago (90m, 24h)")
	fs.StringVar(&f.until, "until", "", "only rows that failed (updated_at) before `TIME`, as --since")
	fs.BoolVar(&f.all, "all", false, "every row of the status (the other filters narrow it)")
}

// parse checks the flags and resolves ids and times; now anchors durations.
func (f *failedFilter) parse(cmd string, now time.Time) error {
	f.parsedFrom = cmd
	if !status.Status(f.status).IsFailed() {
		return usageError{fmt.Errorf("%s: --status must be dead or rejected, got %q", cmd, f.status)}
	}
	if f.ids == "" && f.eventType == "" && f.source == "" && f.since == "" && f.until == "" && !f.all {
		return usageError{fmt.Errorf("%s: say which %s rows: --id 1,2,3, --type T, --source S, --since/--until, or --all", cmd, f.status)}
	}
	var err error
	if f.idList, err = parseIDs(cmd, f.ids); err != nil {
		return err
	}
	if f.sinceTime, err = parseSince(f.since, now); err != nil {
		return usageError{fmt.Errorf("%s: --since: %w", cmd, err)}
	}
	if f.untilTime, err = parseSince(f.until, now); err != nil {
		return usageError{fmt.Errorf("%s: --until: %w", cmd, err)}
	}
	if f.sinceTime != nil && f.untilTime != nil && !f.sinceTime.Before(*f.untilTime) {
		return usageError{fmt.Errorf("%s: --since (%s) must be before --until (%s)", cmd,
			f.sinceTime.Format(time.RFC3339), f.untilTime.Format(time.RFC3339))}
	}
	return nil
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
	}
}

// describe renders the filter for messages and logs.
func (f *failedFilter) describe() string {
	var parts []string
	if len(f.idList) > 0 {
		parts = append(parts, "--id "+f.ids)
	}
	if f.eventType != "" {
		parts = append(parts, "--type "+strconv.Quote(f.eventType))
	}
	if f.source != "" {
		parts = append(parts, "--source "+strconv.Quote(f.source))
	}
	if f.sinceTime != nil {
		parts = append(parts, "--since "+f.sinceTime.UTC().Format(time.RFC3339))
	}
	if f.untilTime != nil {
		parts = append(parts, "--until "+f.untilTime.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "--all"
	}
	return strings.Join(parts, " ")
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
	var total, reported int64
	batches := 0
	lastReport := time.Now()
	stopped := func(err error) (int64, error) {
		if total == 0 || kept == "" {
			return total, fmt.Errorf("%s: %w", cmd, err)
		}
		return total, fmt.Errorf("%s: stopped after %s, which stay %s; run the command again for the rest: %w",
			cmd, plural(total, "row"), kept, err)
	}
	var after int64
	for {
		upto, ok, err := rangeEnd(after)
		if err != nil {
			return stopped(fmt.Errorf("select the next %d %s rows: %w", failedBatch, st, err))
		}
		if !ok {
			return total, nil
		}
		n, err := fn(after, upto)
		total += n
		if err != nil {
			return stopped(err)
		}
		batches++
		after = upto
		if total-reported >= progressRows || time.Since(lastReport) >= progressEvery {
			log.Info().Str("status", st).Int64("rows", total).Int("batches", batches).Int64("last_id", after).
				Msg(cmd + " progress")
			reported, lastReport = total, time.Now()
		}
	}
}

// dryRun lists the matching rows batch after batch, each as "would VERB id
// N: source event_id event_type, DETAIL, last error: …" (detail may add to
// the line), noting in matched the --id rows that matched, and counts them.
func (f *failedFilter) dryRun(ctx context.Context, conn *pgx.Conn, log zerolog.Logger, stdout io.Writer,
	verb string, detail func(driver.FailedRow) string, matched map[int64]bool) (int64, error) {
	return f.eachRange(ctx, conn, log, "", func(after, upto int64) (int64, error) {
		list, err := f.matching(ctx, conn, after, upto)
		if err != nil {
			return 0, err
		}
		for _, r := range list {
			f.mark(matched, r.ID)
			more := ""
			if detail != nil {
				more = ", " + detail(r)
			}
			fmt.Fprintf(stdout, "would %s id %d: %s %s %s%s, last error: %s\n", verb, r.ID, safeText(r.Source),
				safeText(r.EventID), safeText(r.EventType), more, oneLine(r.LastError, 100))
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

// mark notes, with --id, each of ids in matched.
func (f *failedFilter) mark(matched map[int64]bool, ids ...int64) {
	if f.idList == nil {
		return
	}
	for _, id := range ids {
		matched[id] = true
	}
}

// unmatched explains, for every id given with --id that is not in matched,
// why the filter did not select it, in the order the ids were given:
// "id 1: processed, not dead", "id 9999: no such row".
func (f *failedFilter) unmatched(ctx context.Context, conn *pgx.Conn, matched map[int64]bool) ([]string, error) {
	var missing []int64
	for _, id := range f.idList {
		if !matched[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	found, err := driver.RowStates(ctx, conn, missing)
	if err != nil {
		return nil, fmt.Errorf("%s: look up ids: %w", f.parsedFrom, err)
	}
	byID := make(map[int64]driver.RowState, len(found))
	for _, r := range found {
		byID[r.ID] = r
	}
	out := make([]string, 0, len(missing))
	for _, id := range missing {
		r, ok := byID[id]
		var why string
		switch {
		case !ok:
			why = "no such row"
		case string(r.Status) != f.status:
			why = fmt.Sprintf("%s, not %s", r.Status, f.status)
			if r.Status.IsFailed() {
				why += fmt.Sprintf(" (use --status %s)", r.Status)
			}
		default:
			var not []string
			if f.eventType != "" && r.EventType != f.eventType {
				not = append(not, fmt.Sprintf("its type is %q, not %q", r.EventType, f.eventType))
			}
			if f.source != "" && r.Source != f.source {
				not = append(not, fmt.Sprintf("its source is %q, not %q", r.Source, f.source))
			}
			if f.sinceTime != nil && r.UpdatedAt.Before(*f.sinceTime) {
				not = append(not, "it failed before --since ("+r.UpdatedAt.UTC().Format(time.RFC3339)+")")
			}
			if f.untilTime != nil && !r.UpdatedAt.Before(*f.untilTime) {
				not = append(not, "it failed at or after --until ("+r.UpdatedAt.UTC().Format(time.RFC3339)+")")
			}
			if len(not) == 0 {
				not = append(not, "it changed while this command ran")
			}
			why = string(r.Status) + ", but " + strings.Join(not, " and ")
		}
		out = append(out, fmt.Sprintf("id %d: %s", id, why))
	}
	return out, nil
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
