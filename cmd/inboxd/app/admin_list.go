package app

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/opfiles/routesfile"
	"github.com/inboxd/inboxd/internal/ops"
)

// listQueryFlags are the filters of the listings (list, dead): the
// conditions of ops.Filter, a page size and a cursor.
type listQueryFlags struct {
	eventType, source, errorText, key, since, until, after string
	limit                                                  int
	json                                                   bool
}

// register adds the listing flags to fs.
func (f *listQueryFlags) register(fs *flag.FlagSet) {
	registerConditions(fs, &f.eventType, &f.source, &f.errorText, &f.key)
	fs.StringVar(&f.since, "since", "", "only rows of `TIME` or later (received; processed; failed, by the list): RFC 3339, or a Go duration meaning that long ago")
	fs.StringVar(&f.until, "until", "", "only rows before `TIME`, as --since")
	fs.StringVar(&f.after, "after", "", "the page after this `CURSOR` (printed on stderr below a full page)")
	fs.IntVar(&f.limit, "limit", 50, "at most `N` rows")
	jsonFlagVar(fs, &f.json, "print JSON lines")
}

// registerConditions adds the row conditions every listing and action
// takes to fs: --type (and --route, the same), --source, --error, --key.
func registerConditions(fs *flag.FlagSet, eventType, source, errorText, key *string) {
	fs.StringVar(eventType, "type", "", "only rows of this event `type`")
	fs.StringVar(eventType, "route", "", "only rows of this route: its event `type` (the same as --type)")
	fs.StringVar(source, "source", "", sourceUsage)
	fs.StringVar(errorText, "error", "", "only rows whose last error contains `TEXT` (any case)")
	fs.StringVar(key, "key", "", "only rows with this ordering `KEY` (its bytes as text)")
}

// query is the listing's ops query for view.
func (f *listQueryFlags) query(cmd string, view ops.View, now time.Time) (ops.ListQuery, error) {
	if f.limit < 1 || f.limit > 1000 {
		return ops.ListQuery{}, usageError{fmt.Errorf("%s: --limit must be from 1 to 1000, got %d", cmd, f.limit)}
	}
	since, err := parseSince(f.since, now)
	if err != nil {
		return ops.ListQuery{}, usageError{fmt.Errorf("%s: --since: %w", cmd, err)}
	}
	until, err := parseSince(f.until, now)
	if err != nil {
		return ops.ListQuery{}, usageError{fmt.Errorf("%s: --until: %w", cmd, err)}
	}
	return ops.ListQuery{View: view, After: f.after, Limit: f.limit, Filter: ops.Filter{EventType: f.eventType, Source: f.source,
		Error: f.errorText, Key: keyBytes(f.key), Since: since, Until: until}}, nil
}

// listCommand is `inboxd list VIEW`: the rows of any status.
func listCommand() command {
	return command{name: "list", args: "VIEW", summary: "list rows of a view: retrying, waiting, processing, processed, dead or rejected, with what each view shows (next attempt, what a row waits behind, worker and lease, time taken)",
		setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
			var f listQueryFlags
			f.register(fs)
			return func(cfg config.Config) error {
				if len(a.args) != 1 {
					return usageError{fmt.Errorf("list: give one view: %s", strings.Join(viewNames(), ", "))}
				}
				view, err := ops.ParseView(a.args[0])
				if err != nil {
					return usageError{fmt.Errorf("list: %w", err)}
				}
				return runListView(a.ctx, cfg, a.stdout, a.stderr, "list", view, f)
			}
		}}
}

func viewNames() []string {
	var names []string
	for _, v := range ops.Views() {
		names = append(names, string(v))
	}
	return names
}

// listedRow is one row of a listing as -o json prints it.
type listedRow struct {
	ID             int64         `json:"id"`
	Status         status.Status `json:"status"`
	Source         string        `json:"source"`
	EventID        string        `json:"event_id"`
	EventType      string        `json:"event_type"`
	Key            *string       `json:"key,omitempty"`
	Attempts       int           `json:"attempts"`
	MaxAttempts    int           `json:"max_attempts,omitempty"`
	ReceivedAt     time.Time     `json:"received_at"`
	UpdatedAt      time.Time     `json:"updated_at"`
	NextAttemptAt  *time.Time    `json:"next_attempt_at,omitempty"`
	Parked         bool          `json:"parked,omitempty"`
	Behind         string        `json:"behind,omitempty"`
	Worker         string        `json:"worker,omitempty"`
	LeaseExpiresAt *time.Time    `json:"lease_expires_at,omitempty"`
	RunningSeconds float64       `json:"running_seconds,omitempty"`
	ProcessedAt    *time.Time    `json:"processed_at,omitempty"`
	TookSeconds    float64       `json:"took_seconds,omitempty"`
	LastError      string        `json:"last_error"`
}

func toListed(r ops.Row) listedRow {
	l := listedRow{ID: r.ID, Status: r.Status, Source: r.Source, EventID: r.EventID, EventType: r.EventType, Attempts: r.Attempts,
		MaxAttempts: r.MaxAttempts, ReceivedAt: r.ReceivedAt, UpdatedAt: r.UpdatedAt, Parked: r.Parked(), Behind: r.Behind,
		Worker: r.Worker, LeaseExpiresAt: r.LeaseExpiresAt, RunningSeconds: r.RunningFor.Seconds(), ProcessedAt: r.ProcessedAt,
		TookSeconds: r.Took.Seconds(), LastError: r.LastError}
	if r.Key != nil {
		k := string(r.Key)
		l.Key = &k
	}
	if r.Status == status.Received && !r.Parked() {
		at := r.AvailableAt
		l.NextAttemptAt = &at
	}
	return l
}

// runListView prints one page of view.
func runListView(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, cmd string, view ops.View, f listQueryFlags) error {
	q, err := f.query(cmd, view, time.Now())
	if err != nil {
		return err
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	o := ops.New(ops.Config{DB: conn, MaxAttempts: maxAttemptsOf(cfg), Lease: cfg.Lease})
	page, err := o.List(ctx, q)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		for _, r := range page.Rows {
			if err := enc.Encode(toListed(r)); err != nil {
				return err
			}
		}
	} else if err := writeListTable(stdout, view, page.Rows); err != nil {
		return err
	}
	if page.Next != "" {
		fmt.Fprintf(stderr, "inboxd: more rows: --after %s\n", page.Next)
	}
	return nil
}

// writeListTable prints rows as the view's table.
func writeListTable(w io.Writer, view ops.View, rows []ops.Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	head := "ID\tSOURCE\tEVENT_ID\tEVENT_TYPE\t"
	switch view {
	case ops.ViewRetrying:
		fmt.Fprintln(tw, head+"ATTEMPTS\tNEXT_ATTEMPT\tLAST_ERROR")
	case ops.ViewWaiting:
		fmt.Fprintln(tw, head+"RECEIVED_AT\tWAITS_FOR")
	case ops.ViewProcessing:
		fmt.Fprintln(tw, head+"WORKER\tLEASE_EXPIRES\tRUNNING_FOR")
	case ops.ViewProcessed:
		fmt.Fprintln(tw, head+"PROCESSED_AT\tTOOK")
	default:
		fmt.Fprintln(tw, "ID\tSTATUS\tSOURCE\tEVENT_ID\tEVENT_TYPE\tATTEMPTS\tUPDATED_AT\tLAST_ERROR")
	}
	for _, r := range rows {
		row := fmt.Sprintf("%d\t%s\t%s\t%s\t", r.ID, safeText(r.Source), safeText(r.EventID), safeText(r.EventType))
		switch view {
		case ops.ViewRetrying:
			used := fmt.Sprint(r.Attempts)
			if r.MaxAttempts > 0 {
				used += fmt.Sprintf(" of %d", r.MaxAttempts)
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\n", row, used, ts(r.AvailableAt), oneLine(r.LastError, 100))
		case ops.ViewWaiting:
			behind := r.Behind
			if behind == "" {
				behind = "due " + ts(r.AvailableAt)
			}
			fmt.Fprintf(tw, "%s%s\t%s\n", row, ts(r.ReceivedAt), behind)
		case ops.ViewProcessing:
			exp := "-"
			if r.LeaseExpiresAt != nil {
				exp = ts(*r.LeaseExpiresAt)
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\n", row, safeText(r.Worker), exp, r.RunningFor.Round(time.Millisecond))
		case ops.ViewProcessed:
			at := "-"
			if r.ProcessedAt != nil {
				at = ts(*r.ProcessedAt)
			}
			fmt.Fprintf(tw, "%s%s\t%s\n", row, at, r.Took.Round(time.Millisecond))
		default:
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Status, safeText(r.Source), safeText(r.EventID), safeText(r.EventType),
				r.Attempts, ts(r.UpdatedAt), oneLine(r.LastError, 100))
		}
	}
	return tw.Flush()
}

// maxAttemptsOf returns the attempt budget of each route from cfg: the
// routes file's max_attempts, else INBOXD_MAX_ATTEMPTS.
func maxAttemptsOf(cfg config.Config) func(string) int {
	perRoute := map[string]int{}
	if cfg.Routes != "" {
		if r, err := routesfile.Load(cfg.Routes); err == nil {
			for _, rc := range r.Routes {
				if rc.MaxAttempts > 0 && rc.Handler != handlers.HandlerRiver {
					perRoute[rc.Type] = rc.MaxAttempts
				}
			}
		}
	}
	return func(t string) int {
		if n, ok := perRoute[t]; ok {
			return n
		}
		return cfg.MaxAttempts
	}
}
