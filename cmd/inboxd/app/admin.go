package app

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/migrations"
)

var (
	//go:embed sql/stats.sql
	statsSQL string
	//go:embed sql/oldest.sql
	oldestSQL string
	//go:embed sql/failed_list.sql
	failedListSQL string
	//go:embed sql/requeue.sql
	requeueSQL string
)

// statuses in the order operators read them.
var statuses = []string{"received", "processing", "processed", "dead", "rejected"}

// statsReport is the stats command's output.
type statsReport struct {
	Rows                  map[string]int64 `json:"rows"`
	OldestReadyAgeSeconds float64          `json:"oldest_ready_age_seconds"`
	SchemaVersion         int32            `json:"schema_version"`
	LatestSchemaVersion   int32            `json:"latest_schema_version"`
}

func runStats(ctx context.Context, cfg config.Config, stdout io.Writer, asJSON bool) error {
	conn, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	rep := statsReport{Rows: make(map[string]int64, len(statuses))}
	for _, s := range statuses {
		rep.Rows[s] = 0
	}
	if rep.SchemaVersion, rep.LatestSchemaVersion, err = migrations.Status(ctx, conn); err != nil {
		return err
	}
	if rep.SchemaVersion == 0 {
		return errors.New("the inbox table does not exist yet: run `inboxd migrate`")
	}
	rows, err := conn.Query(ctx, statsSQL)
	if err != nil {
		return fmt.Errorf("count rows: %w", err)
	}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			rows.Close()
			return fmt.Errorf("count rows: %w", err)
		}
		rep.Rows[status] = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count rows: %w", err)
	}
	if err := conn.QueryRow(ctx, oldestSQL).Scan(&rep.OldestReadyAgeSeconds); err != nil {
		return fmt.Errorf("oldest row: %w", err)
	}

	if asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tROWS")
	for _, s := range statuses {
		fmt.Fprintf(tw, "%s\t%d\n", s, rep.Rows[s])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "oldest due received row: %s\n", time.Duration(rep.OldestReadyAgeSeconds*float64(time.Second)).Round(time.Millisecond))
	fmt.Fprintf(stdout, "schema version: %d (this binary: %d)\n", rep.SchemaVersion, rep.LatestSchemaVersion)
	return nil
}

// listFlags are the dead command's flags.
type listFlags struct {
	status    string
	eventType string
	limit     int
	json      bool
}

// failedRow is one row of the dead command's output.
type failedRow struct {
	ID        int64     `json:"id"`
	Status    string    `json:"status"`
	Source    string    `json:"source"`
	EventID   string    `json:"event_id"`
	EventType string    `json:"event_type"`
	Attempts  int       `json:"attempts"`
	UpdatedAt time.Time `json:"updated_at"`
	LastError string    `json:"last_error"`
}

func runList(ctx context.Context, cfg config.Config, stdout io.Writer, f listFlags) error {
	if f.status != "dead" && f.status != "rejected" {
		return usageError{fmt.Errorf("dead: --status must be dead or rejected, got %q", f.status)}
	}
	if f.limit < 1 {
		return usageError{fmt.Errorf("dead: --limit must be at least 1, got %d", f.limit)}
	}
	conn, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, failedListSQL, f.status, f.eventType, f.limit)
	if err != nil {
		return fmt.Errorf("list %s rows: %w", f.status, err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[failedRow])
	if err != nil {
		return fmt.Errorf("list %s rows: %w", f.status, err)
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		for _, r := range list {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tSOURCE\tEVENT_ID\tEVENT_TYPE\tATTEMPTS\tUPDATED_AT\tLAST_ERROR")
	for _, r := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Status, r.Source, r.EventID, r.EventType,
			r.Attempts, r.UpdatedAt.UTC().Format(time.RFC3339), oneLine(r.LastError, 100))
	}
	return tw.Flush()
}

// requeueFlags are the requeue command's flags.
type requeueFlags struct {
	ids       string
	eventType string
	all       bool
}

func runRequeue(ctx context.Context, cfg config.Config, stdout io.Writer, f requeueFlags) error {
	if f.ids == "" && f.eventType == "" && !f.all {
		return usageError{errors.New("requeue: say which dead rows: --id 1,2,3, --type T, or --all")}
	}
	var ids []int64
	if f.ids != "" {
		for _, s := range strings.Split(f.ids, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return usageError{fmt.Errorf("requeue: --id: %q is not a row id", s)}
			}
			ids = append(ids, id)
		}
	}
	conn, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tag, err := conn.Exec(ctx, requeueSQL, ids, f.eventType)
	if err != nil {
		return fmt.Errorf("requeue: %w", err)
	}
	if tag.RowsAffected() > 0 {
		// Wake the workers now rather than at their next poll.
		if _, err := conn.Exec(ctx, "SELECT pg_notify('inboxd_received', '')"); err != nil {
			return fmt.Errorf("requeue: notify workers: %w", err)
		}
	}
	fmt.Fprintf(stdout, "requeued %d dead rows\n", tag.RowsAffected())
	return nil
}

// oneLine flattens s to one line of at most n runes for table output.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
