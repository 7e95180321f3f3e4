package app

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// outboxCommands are `inboxd outbox stats|dead|show|requeue|discard`, the
// operator's commands on the outbox table (migrations/011_outbox.sql), as
// the inbox's stats, dead, show, requeue and discard are on the inbox.
func outboxCommands() []command {
	return []command{
		{name: "outbox stats", summary: "outbox rows pending and dead (published: an estimate), per destination pending, oldest pending and dead; shards by relay, relays alive",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				asJSON := jsonFlag(fs, "print one JSON object")
				return func(cfg config.Config) error { return runOutboxStats(a.ctx, cfg, a.stdout, *asJSON) }
			}},
		{name: "outbox dead", summary: "list dead outbox rows, newest first, with their last_error",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				var f outboxListFlags
				f.filter.register(fs, false)
				fs.IntVar(&f.limit, "limit", 50, "at most `N` rows")
				jsonFlagVar(fs, &f.json, "print JSON lines")
				return func(cfg config.Config) error { return runOutboxList(a.ctx, cfg, a.stdout, f) }
			}},
		{name: "outbox show", args: "ID|EVENT_ID", summary: "print one outbox row (by id, else by event id), every column, with its headers and payload",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				var f showFlags
				jsonFlagVar(fs, &f.json, "print one JSON object (payload in base64)")
				fs.BoolVar(&f.full, "full", false, "print the whole payload, however long")
				return func(cfg config.Config) error { return runOutboxShow(a.ctx, cfg, a.stdout, a.args, f) }
			}},
		outboxChangeCommand("outbox requeue", "return dead outbox rows to pending for the relay (attempts 0, due now); each is published after the rows of its key that went out while it was dead",
			"list what would be requeued; change nothing", false, runOutboxRequeue),
		outboxChangeCommand("outbox discard", "delete dead outbox rows (with --pending, pending ones named by --id: never published, their key's later rows go on); logs what it deleted",
			"list what would be deleted; delete nothing", true, runOutboxDiscard),
	}
}

// outboxChangeCommand is outbox requeue or discard: the filter's flags with
// --id and --all, --dry-run (its usage dryRunUsage), --pending when
// pending (discard), and run.
func outboxChangeCommand(name, summary, dryRunUsage string, pending bool,
	run func(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, f outboxChangeFlags) error) command {
	return command{name: name, summary: summary,
		setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
			var f outboxChangeFlags
			f.filter.register(fs, true)
			if pending {
				fs.BoolVar(&f.filter.pending, "pending", false,
					"pending rows instead of dead ones, each named by --id (the other filters narrow it): deleted before the relay publishes them; one a relay is sending at that moment may still reach its broker once")
			}
			fs.BoolVar(&f.dryRun, "dry-run", false, dryRunUsage)
			return func(cfg config.Config) error { return run(a.ctx, cfg, a.stdout, a.stderr, f) }
		}}
}

// outboxFilter selects dead outbox rows for outbox dead, requeue and
// discard (driver.FailedFilter on the outbox's columns), or for discard
// --pending pending ones, by --id. Its conditions combine with AND; for
// requeue and discard, --all selects every dead row when no other
// condition is given.
type outboxFilter struct {
	rowSelection
	destination string
	eventType   string
	errorPart   string
	all         bool
	pending     bool
}

// rowStatus is the status of the rows the filter selects.
func (f *outboxFilter) rowStatus() string {
	if f.pending {
		return driver.OutboxPending
	}
	return driver.OutboxDead
}

// register adds the filter's flags to fs; selecting (requeue, discard) adds
// --id and --all.
func (f *outboxFilter) register(fs *flag.FlagSet, selecting bool) {
	if selecting {
		fs.StringVar(&f.ids, "id", "", "only the rows with these `IDS` (comma-separated)")
	}
	fs.StringVar(&f.destination, "destination", "", "only rows to this `destination` (kafka:orders, amqp:exchange/routing-key, nats:subject)")
	fs.StringVar(&f.eventType, "type", "", "only rows of this event `type`")
	fs.StringVar(&f.since, "since", "", "only rows created (created_at; a row keeps no time of death) at or after `TIME`: RFC 3339, or a Go duration meaning that long ago (90m, 24h)")
	fs.StringVar(&f.until, "until", "", "only rows created before `TIME`, as --since")
	fs.StringVar(&f.errorPart, "error", "", "only rows whose last_error contains `TEXT` (in any case)")
	if selecting {
		fs.BoolVar(&f.all, "all", false, "every dead row (the other filters narrow it)")
	}
}

// parse checks the flags and resolves ids and times; now anchors durations.
// selecting commands (requeue, discard) must say which rows.
func (f *outboxFilter) parse(cmd string, now time.Time, selecting bool) error {
	if f.pending && (f.ids == "" || f.all) {
		// A pending row is one the relay is about to publish: deleting
		// it is a decision about that row, never a sweep.
		return usageError{fmt.Errorf("%s: --pending needs --id 1,2,3 (and not --all): name the pending rows to delete (inboxd outbox stats and show find them)", cmd)}
	}
	if selecting && f.ids == "" && f.destination == "" && f.eventType == "" && f.since == "" && f.until == "" &&
		f.errorPart == "" && !f.all {
		return usageError{fmt.Errorf("%s: say which dead rows: --id 1,2,3, --destination D, --type T, --since/--until, --error TEXT, or --all", cmd)}
	}
	return f.parseSelection(cmd, now)
}

// query is the filter as the driver takes it.
func (f *outboxFilter) query() driver.FailedFilter {
	return driver.FailedFilter{
		Status:    status.Dead,
		IDs:       f.idList, // nil: any
		EventType: f.eventType,
		Source:    f.destination,
		Since:     f.sinceTime,
		Until:     f.untilTime,
		Error:     f.errorPart,
	}
}

// conditions are the filter's own conditions, for describeWith and
// logWith: --error comes after --since and --until.
func (f *outboxFilter) conditions() (own, more []condition) {
	return []condition{{"destination", "destination", f.destination}, {"type", "event_type", f.eventType}},
		[]condition{{"error", "error", f.errorPart}}
}

// describe renders the filter for messages and logs.
func (f *outboxFilter) describe() string { return f.describeWith(f.conditions()) }

// logFields adds the filter's fields to ev.
func (f *outboxFilter) logFields(ev *zerolog.Event) *zerolog.Event {
	own, more := f.conditions()
	return f.logWith(ev, own, more)
}

// eachRange calls fn with each range of ids (after, upto] of the dead (or
// pending) outbox rows, failedBatch of them at a time, as
// failedFilter.eachRange does for the inbox (eachBatch: progress on log,
// resumable).
func (f *outboxFilter) eachRange(ctx context.Context, conn *pgx.Conn, log zerolog.Logger, kept string,
	fn func(after, upto int64) (int64, error)) (int64, error) {
	return eachBatch(f.parsedFrom, f.rowStatus(), log, kept, func(after int64) (int64, bool, error) {
		return driver.OutboxRangeEnd(ctx, conn, f.rowStatus(), f.query(), after, failedBatch)
	}, fn)
}

// unmatched explains, for every id given with --id that is not in matched,
// why the filter did not select it, in the order the ids were given:
// "id 1: published, not dead", "id 9999: no such row" ("…, not pending"
// with --pending).
func (f *outboxFilter) unmatched(ctx context.Context, conn *pgx.Conn, matched map[int64]bool) ([]string, error) {
	lookup := func(ids []int64) ([]driver.OutboxRowState, error) { return driver.OutboxRowStates(ctx, conn, ids) }
	return explainUnmatched(&f.rowSelection, matched, lookup, func(r driver.OutboxRowState) int64 { return r.ID },
		func(r driver.OutboxRowState) string {
			if r.Status != f.rowStatus() {
				return fmt.Sprintf("%s, not %s", r.Status, f.rowStatus())
			}
			not := append(mismatch("destination", r.Destination, f.destination), mismatch("type", r.EventType, f.eventType)...)
			not = append(not, f.outside(r.CreatedAt, "it was created")...)
			if f.errorPart != "" && !strings.Contains(strings.ToLower(r.LastError), strings.ToLower(f.errorPart)) {
				not = append(not, fmt.Sprintf("its last_error does not contain %q", f.errorPart))
			}
			return butNot(r.Status, not)
		})
}

// outboxStatsReport is the outbox stats command's output. Pending and dead
// rows are counted through their partial indexes; published rows are not
// counted (they are most of the table): PublishedEstimate is the planner's
// figure for the table less the pending and dead rows.
type outboxStatsReport struct {
	// Rows counts the pending and the dead rows.
	Rows map[string]int64 `json:"rows"`
	// PublishedEstimate is pg_class.reltuples less the pending and dead
	// rows, as of the table's last VACUUM or ANALYZE; -1 when the table was
	// never vacuumed nor analyzed.
	PublishedEstimate int64 `json:"published_estimate"`
	// OldestPendingAgeSeconds is the age by created_at of the oldest
	// pending row (waiting after a refusal included).
	OldestPendingAgeSeconds float64                   `json:"oldest_pending_age_seconds"`
	Destinations            []outboxDestinationReport `json:"destinations"`
	Shards                  []outboxShardsReport      `json:"shards"`
	// UnownedShards are the shards no relay holds a live lease on.
	UnownedShards int                 `json:"unowned_shards"`
	Relays        []outboxRelayReport `json:"relays"`
	RelaysAlive   int                 `json:"relays_alive"`
}

// outboxDestinationReport is one destination's pending and dead rows.
type outboxDestinationReport struct {
	Destination             string  `json:"destination"`
	Pending                 int64   `json:"pending"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	Dead                    int64   `json:"dead"`
}

// outboxShardsReport is a relay and the shards it holds a live lease on,
// until when.
type outboxShardsReport struct {
	Owner  string `json:"owner"`
	Shards int    `json:"shards"`
	// Until and LastUntil are the earliest and the latest end of its leases.
	Until     time.Time `json:"until"`
	LastUntil time.Time `json:"last_until"`
}

// outboxRelayReport is one relay of outbox_relays.
type outboxRelayReport struct {
	Relay  string    `json:"relay"`
	SeenAt time.Time `json:"seen_at"`
	// Alive says it was seen within the minute.
	Alive bool `json:"alive"`
}

func runOutboxStats(ctx context.Context, cfg config.Config, stdout io.Writer, asJSON bool) error {
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	s, err := driver.ReadOutboxReport(ctx, conn)
	if err != nil {
		return fmt.Errorf("outbox stats: %w", err)
	}
	rep := outboxStatsReport{Rows: map[string]int64{"pending": 0, "dead": 0}, PublishedEstimate: -1,
		Destinations: []outboxDestinationReport{}, Shards: []outboxShardsReport{}, Relays: []outboxRelayReport{}}
	var oldest time.Duration
	for _, d := range s.Destinations {
		rep.Rows["pending"] += d.Pending
		rep.Rows["dead"] += d.Dead
		oldest = max(oldest, d.OldestPendingAge)
		rep.Destinations = append(rep.Destinations, outboxDestinationReport{Destination: d.Destination, Pending: d.Pending,
			OldestPendingAgeSeconds: d.OldestPendingAge.Seconds(), Dead: d.Dead})
	}
	rep.OldestPendingAgeSeconds = oldest.Seconds()
	if s.TableRowsEstimate >= 0 {
		rep.PublishedEstimate = max(int64(s.TableRowsEstimate)-rep.Rows["pending"]-rep.Rows["dead"], 0)
	}
	for _, h := range s.Shards {
		if h.Owner == "" {
			rep.UnownedShards += h.Shards
			continue
		}
		rep.Shards = append(rep.Shards, outboxShardsReport{Owner: h.Owner, Shards: h.Shards, Until: h.FirstExpiry, LastUntil: h.LastExpiry})
	}
	for _, r := range s.Relays {
		if r.Alive {
			rep.RelaysAlive++
		}
		rep.Relays = append(rep.Relays, outboxRelayReport{Relay: r.Relay, SeenAt: r.SeenAt, Alive: r.Alive})
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tROWS")
	fmt.Fprintf(tw, "pending\t%d\n", rep.Rows["pending"])
	fmt.Fprintf(tw, "dead\t%d\n", rep.Rows["dead"])
	if rep.PublishedEstimate < 0 {
		fmt.Fprintf(tw, "published\t?\t(not counted; no estimate before the table's first VACUUM or ANALYZE)\n")
	} else {
		fmt.Fprintf(tw, "published\t~%d\t(not counted: the planner's estimate as of the last VACUUM or ANALYZE)\n", rep.PublishedEstimate)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "oldest pending row: %s (by created_at)\n", oldest.Round(time.Millisecond))

	if len(rep.Destinations) > 0 {
		fmt.Fprintln(stdout)
		fmt.Fprintln(tw, "DESTINATION\tPENDING\tOLDEST_PENDING\tDEAD")
		for _, d := range s.Destinations {
			age := "-"
			if d.Pending > 0 {
				age = d.OldestPendingAge.Round(time.Millisecond).String()
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", safeText(d.Destination), d.Pending, age, d.Dead)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(stdout)
	fmt.Fprintln(tw, "SHARD_OWNER\tSHARDS\tLEASES_UNTIL")
	for _, h := range rep.Shards {
		until := h.Until.UTC().Format(time.RFC3339)
		if !h.LastUntil.Equal(h.Until) {
			until += " to " + h.LastUntil.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", safeText(h.Owner), h.Shards, until)
	}
	if rep.UnownedShards > 0 {
		fmt.Fprintf(tw, "(nobody)\t%d\t-\n", rep.UnownedShards)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	names := make([]string, 0, len(rep.Relays))
	for _, r := range rep.Relays {
		if r.Alive {
			names = append(names, safeText(r.Relay))
		}
	}
	line := fmt.Sprintf("relays alive:       %d of %d (seen within the minute)", rep.RelaysAlive, len(rep.Relays))
	if len(names) > 0 {
		line += ": " + strings.Join(names, ", ")
	}
	_, err = fmt.Fprintln(stdout, line)
	return err
}

// outboxListFlags are the outbox dead command's flags.
type outboxListFlags struct {
	filter outboxFilter
	limit  int
	json   bool
}

// outboxDeadRow is one dead outbox row, without its payload and headers, as
// the outbox dead command's --json prints it (a driver.OutboxDeadRow).
type outboxDeadRow struct {
	ID          int64     `json:"id"`
	Destination string    `json:"destination"`
	EventID     string    `json:"event_id"`
	EventType   string    `json:"event_type"`
	Key         *string   `json:"key"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error"`
	CreatedAt   time.Time `json:"created_at"`
}

func runOutboxList(ctx context.Context, cfg config.Config, stdout io.Writer, f outboxListFlags) error {
	if err := f.filter.parse("outbox dead", time.Now(), false); err != nil {
		return err
	}
	if f.limit < 1 {
		return usageError{fmt.Errorf("outbox dead: --limit must be at least 1, got %d", f.limit)}
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	list, err := driver.ListOutboxDead(ctx, conn, f.filter.query(), f.limit)
	if err != nil {
		return fmt.Errorf("list dead outbox rows: %w", err)
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		for _, r := range list {
			if err := enc.Encode(outboxDeadRow(r)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tDESTINATION\tEVENT_ID\tEVENT_TYPE\tKEY\tATTEMPTS\tCREATED_AT\tLAST_ERROR")
	for _, r := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, safeText(r.Destination), safeText(r.EventID), safeText(r.EventType),
			outboxKey(r.Key), r.Attempts, r.CreatedAt.UTC().Format(time.RFC3339), oneLine(r.LastError, 100))
	}
	return tw.Flush()
}

// outboxKey renders a row's key on one line: "-" for none.
func outboxKey(k *string) string {
	if k == nil {
		return "-"
	}
	return safeText(oneLine(*k, 60))
}

// outboxShowLimit is how many rows show prints for an event id that
// several rows carry.
const outboxShowLimit = 10

// runOutboxShow prints the outbox row with the id given, or, when there is
// none (or the argument is not a number), the rows with that event id:
// every column, with headers and payload, as show prints an inbox row.
func runOutboxShow(ctx context.Context, cfg config.Config, stdout io.Writer, args []string, f showFlags) error {
	if len(args) != 1 {
		return usageError{fmt.Errorf("outbox show: give exactly one row id or event id (inboxd outbox show 42), got %d arguments", len(args))}
	}
	arg := args[0]
	if arg == "" {
		return usageError{fmt.Errorf("outbox show: the row id or event id is empty")}
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var found [][]driver.Column
	if id, err := strconv.ParseInt(arg, 10, 64); err == nil && id >= 1 {
		cols, ok, err := driver.ShowOutboxRow(ctx, conn, id)
		if err != nil {
			return fmt.Errorf("outbox show: %w", err)
		}
		if ok {
			found = append(found, cols)
		}
	}
	if len(found) == 0 {
		found, err = driver.ShowOutboxEvent(ctx, conn, arg, outboxShowLimit+1)
		if err != nil {
			return fmt.Errorf("outbox show: %w", err)
		}
	}
	if len(found) == 0 {
		return fmt.Errorf("outbox show: no row with id or event id %s", safeText(arg))
	}
	more := len(found) > outboxShowLimit
	if more {
		found = found[:outboxShowLimit]
	}
	for i, cols := range found {
		if f.json {
			err = showJSON(stdout, cols)
		} else {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			err = showText(stdout, cols, f.full)
		}
		if err != nil {
			return err
		}
	}
	if len(found) > 1 && !f.json {
		note := fmt.Sprintf("%d rows have the event id %s", len(found), safeText(arg))
		if more {
			note = fmt.Sprintf("more than %d rows have the event id %s; the first %d are shown", outboxShowLimit, safeText(arg), outboxShowLimit)
		}
		fmt.Fprintln(stdout, note)
	}
	return nil
}
