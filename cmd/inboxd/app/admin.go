package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/ops"
	"github.com/inboxd/inboxd/migrations"
)

// statsReport is the stats command's output: the figures of the inbox
// gauges (driver.ReadStats, through the partial indexes on the live
// statuses; processed rows are not counted) and the schema version.
type statsReport struct {
	// Rows counts the rows of each live status: received, processing,
	// dead, rejected.
	Rows map[string]int64 `json:"rows"`
	// StaleRows counts received rows (waiting in backoff included) received
	// more than StaleAfterSeconds ago.
	StaleRows         int64   `json:"stale_rows"`
	StaleAfterSeconds float64 `json:"stale_after_seconds"`
	// OldestReceivedAgeSeconds is the age by received_at of the oldest
	// received row, backoff included.
	OldestReceivedAgeSeconds float64 `json:"oldest_received_age_seconds"`
	// OldestReadyAgeSeconds is how long the oldest due received row has
	// waited since its available_at.
	OldestReadyAgeSeconds float64 `json:"oldest_ready_age_seconds"`
	// SchemaVersion is the database's schema version, LatestSchemaVersion
	// the newest this binary knows.
	SchemaVersion       int32 `json:"schema_version"`
	LatestSchemaVersion int32 `json:"latest_schema_version"`
	// SchemaCompatible says whether this binary can run on the schema;
	// SchemaAhead whether the schema is newer than the binary.
	SchemaCompatible bool `json:"schema_compatible"`
	SchemaAhead      bool `json:"schema_ahead"`
	// OldestCompatibleSchema is, for a newer schema, the oldest schema
	// version whose binaries it keeps working (0: unknown or not newer).
	OldestCompatibleSchema int32 `json:"oldest_compatible_schema,omitempty"`
	// Estimated names the statuses whose Rows are estimates (true): dead
	// and rejected rows past driver.ExactCountLimit are not counted one
	// by one.
	Estimated map[string]bool `json:"estimated,omitempty"`
}

// liveStatuses in the order operators read them.
var liveStatuses = status.Strings(status.Live)

func runStats(ctx context.Context, cfg config.Config, stdout io.Writer, asJSON bool) error {
	conn, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	st, err := migrations.Inspect(ctx, conn)
	if err != nil {
		return err
	}
	if st.Current == 0 {
		return st.Err()
	}
	s, err := driver.ReadStats(ctx, conn, cfg.StaleAfter)
	if err != nil {
		return err
	}
	rep := statsReport{
		Rows: map[string]int64{
			string(status.Received): s.Received, string(status.Processing): s.Processing,
			string(status.Dead): s.Dead, string(status.Rejected): s.Rejected,
		},
		StaleRows:                s.Stale,
		StaleAfterSeconds:        cfg.StaleAfter.Seconds(),
		OldestReceivedAgeSeconds: s.OldestReceivedAge.Seconds(),
		OldestReadyAgeSeconds:    s.OldestReadyAge.Seconds(),
		SchemaVersion:            st.Current,
		LatestSchemaVersion:      st.Latest,
		SchemaCompatible:         st.Compatible(),
		SchemaAhead:              st.Ahead(),
	}
	if st.Ahead() {
		rep.OldestCompatibleSchema = st.OldestCompatible
	}
	for st, est := range map[string]bool{string(status.Dead): s.DeadEstimated, string(status.Rejected): s.RejectedEstimated} {
		if est {
			if rep.Estimated == nil {
				rep.Estimated = map[string]bool{}
			}
			rep.Estimated[st] = true
		}
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tROWS")
	for _, st := range liveStatuses {
		if rep.Estimated[st] {
			fmt.Fprintf(tw, "%s\t~%d\t(estimated: more than %d)\n", st, rep.Rows[st], driver.ExactCountLimit)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\n", st, rep.Rows[st])
	}
	fmt.Fprintf(tw, "stale\t%d\t(received more than %s ago)\n", s.Stale, cfg.StaleAfter)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "oldest received row: %s (backoff included)\n", s.OldestReceivedAge.Round(time.Millisecond))
	fmt.Fprintf(stdout, "oldest due row:      %s waiting\n", s.OldestReadyAge.Round(time.Millisecond))
	var schema string
	switch {
	case st.Current == st.Latest:
		schema = "up to date"
	case st.Compatible():
		schema = fmt.Sprintf("newer than this inboxd and compatible with it (oldest compatible: %d)", st.OldestCompatible)
	default:
		schema = "NOT compatible: " + st.Err().Error()
	}
	fmt.Fprintf(stdout, "schema version:      %d (this inboxd: %d): %s\n", st.Current, st.Latest, schema)
	return nil
}

// connectSchema connects and checks that this binary can work on the
// database's schema (the same version, or a newer compatible one).
func connectSchema(ctx context.Context, cfg config.Config) (*pgx.Conn, error) {
	conn, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	st, err := migrations.Inspect(ctx, conn)
	if err == nil {
		err = st.Err()
	}
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// listFlags are the dead command's flags.
type listFlags struct {
	status string
	query  listQueryFlags
}

// runList is the dead command: a page of the dead or rejected rows
// (ops.List).
func runList(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, f listFlags) error {
	if !status.Status(f.status).IsFailed() {
		return usageError{fmt.Errorf("dead: --status must be dead or rejected, got %q", f.status)}
	}
	if f.query.limit < 1 {
		return usageError{fmt.Errorf("dead: --limit must be at least 1, got %d", f.query.limit)}
	}
	return runListView(ctx, cfg, stdout, stderr, "dead", ops.View(f.status), f.query)
}

// oneLine flattens s to one line of at most n runes for table output;
// control characters become U+FFFD.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, s)
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
