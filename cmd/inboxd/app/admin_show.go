package app

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/ops"
	"github.com/inboxd/inboxd/internal/sensitive"
)

// showFlags are the show command's flags.
type showFlags struct {
	json   bool
	full   bool
	source string
}

// Without --full, show prints at most this much of a payload: text up to
// showTextLimit bytes, a hex dump of up to showBinaryLimit bytes.
const (
	showTextLimit   = 4096
	showBinaryLimit = 1024
)

// runShow prints one row, every column the table has, with its key,
// headers and payload.
func runShow(ctx context.Context, cfg config.Config, stdout io.Writer, args []string, f showFlags) error {
	if len(args) != 1 {
		return usageError{fmt.Errorf("show: give exactly one row id or event id (inboxd show 42, inboxd show ord-13), got %d arguments", len(args))}
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	id, err := showTarget(ctx, conn, stdout, args[0], f.source)
	if err != nil {
		return err
	}

	// Every column: one a later migration adds is shown too.
	cols, ok, err := driver.ShowRow(ctx, conn, id)
	if err != nil {
		return fmt.Errorf("show: %w", err)
	}
	if !ok {
		return fmt.Errorf("show: no row with id %d", id)
	}
	history, err := ops.New(ops.Config{DB: conn}).History(ctx, id)
	if err != nil {
		return fmt.Errorf("show: %w", err)
	}
	if f.json {
		return showJSON(stdout, append(cols, driver.Column{Name: "history", Value: historyReport(history)}))
	}
	if err := showText(stdout, cols, f.full); err != nil {
		return err
	}
	return showHistory(stdout, history)
}

// attemptReport is one attempt as show --json prints it.
type attemptReport struct {
	Attempt         int       `json:"attempt"`
	StartedAt       time.Time `json:"started_at"`
	DurationSeconds float64   `json:"duration_seconds"`
	Worker          string    `json:"worker"`
	Outcome         string    `json:"outcome"`
	Error           string    `json:"error,omitempty"`
}

func historyReport(list []ops.Attempt) []attemptReport {
	out := make([]attemptReport, len(list))
	for i, a := range list {
		out[i] = attemptReport{Attempt: a.Attempt, StartedAt: a.StartedAt, DurationSeconds: a.FinishedAt.Sub(a.StartedAt).Seconds(),
			Worker: a.Worker, Outcome: a.Outcome, Error: a.Error}
	}
	return out
}

// showHistory prints the row's attempts, oldest first.
func showHistory(w io.Writer, list []ops.Attempt) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "\nattempts: none recorded (only failed attempts, and the one that ends a row after a failure, are)")
		return err
	}
	fmt.Fprintf(w, "\nattempts (the last %d are kept):\n", driver.KeptAttempts)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ATTEMPT\tSTARTED\tTOOK\tWORKER\tOUTCOME\tERROR")
	for _, a := range list {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, a.StartedAt.UTC().Format(time.RFC3339Nano),
			a.FinishedAt.Sub(a.StartedAt).Round(time.Microsecond), safeText(a.Worker), a.Outcome, oneLine(a.Error, 100))
	}
	return tw.Flush()
}

// showTarget resolves show's argument to a row id: a row id, else an
// event id (of the source --source when given; of any source when it
// is the only row that holds it). With several sources holding the event
// id it lists them and returns 0 and an error that asks for --source.
func showTarget(ctx context.Context, conn driver.DB, stdout io.Writer, arg, source string) (int64, error) {
	if source != "" {
		id, _, ok, err := driver.EventOwner(ctx, conn, source, arg)
		switch {
		case err != nil:
			return 0, fmt.Errorf("show: %w", err)
		case !ok:
			return 0, fmt.Errorf("show: source %s holds no event %s", safeText(source), safeText(arg))
		}
		return id, nil
	}
	if id, err := strconv.ParseInt(arg, 10, 64); err == nil && id > 0 {
		if _, ok, err := driver.ShowRow(ctx, conn, id); err != nil || ok {
			return id, err
		}
	}
	rows, err := driver.FindEvent(ctx, conn, arg)
	if err != nil {
		return 0, fmt.Errorf("show: %w", err)
	}
	switch len(rows) {
	case 0:
		if id, err := strconv.ParseInt(arg, 10, 64); err == nil && id > 0 {
			return 0, fmt.Errorf("show: no row with id %d, and no source holds event id %s", id, safeText(arg))
		}
		return 0, fmt.Errorf("show: %s is neither a row id nor an event id of any source", safeText(arg))
	case 1:
		return rows[0].ID, nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tSOURCE\tEVENT_TYPE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", r.ID, r.Status, safeText(r.Source), safeText(r.EventType))
	}
	_ = tw.Flush()
	return 0, usageError{fmt.Errorf("show: %d sources hold event id %s: say which with --source, or give the row id", len(rows), safeText(arg))}
}

// showJSON prints the row as one JSON object, columns in table order:
// bytea (key, payload) in base64, jsonb (headers) as JSON, times in RFC 3339;
// credential-like headers masked (maskHeaders).
func showJSON(w io.Writer, cols []driver.Column) error {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, c := range maskHeaders(cols) {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(c.Name)
		value, err := json.Marshal(c.Value)
		if err != nil {
			return fmt.Errorf("show: column %s: %w", c.Name, err)
		}
		b.Write(name)
		b.WriteByte(':')
		b.Write(value)
	}
	b.WriteString("}\n")
	_, err := w.Write(b.Bytes())
	return err
}

// showText prints the row for a person: one column a line, then the key,
// the headers (credential-like ones masked: maskHeaders) and the payload.
func showText(w io.Writer, cols []driver.Column, full bool) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	var key, payload []byte
	var haveKey bool
	var headers any
	for _, c := range maskHeaders(cols) {
		switch c.Name {
		case "key": // bytea in the inbox, text in the outbox
			switch v := c.Value.(type) {
			case []byte:
				key = v
			case string:
				key = []byte(v)
			}
			haveKey = c.Value != nil
			continue
		case "payload":
			payload, _ = c.Value.([]byte)
			continue
		case "headers":
			headers = c.Value
			continue
		}
		fmt.Fprintf(tw, "%s:\t%s\n", c.Name, textValue(c.Value))
	}
	switch {
	case !haveKey:
		fmt.Fprintf(tw, "key:\t-\n")
	case isText(key):
		fmt.Fprintf(tw, "key:\t%s\n", strconv.Quote(string(key)))
	default:
		fmt.Fprintf(tw, "key:\t%s (hex; %s, not UTF-8 text)\n", hex.EncodeToString(key), plural(int64(len(key)), "byte"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	b.WriteString("headers:")
	hs, _ := headers.(map[string]any)
	if len(hs) == 0 {
		b.WriteString(" none\n")
	} else {
		b.WriteByte('\n')
		names := make([]string, 0, len(hs))
		for n := range hs {
			names = append(names, n)
		}
		sort.Strings(names)
		htw := tabwriter.NewWriter(&b, 0, 4, 1, ' ', 0)
		for _, n := range names {
			fmt.Fprintf(htw, "  %s:\t%s\n", safeText(n), headerValue(hs[n]))
		}
		if err := htw.Flush(); err != nil {
			return err
		}
	}

	shown := payload
	if isText(payload) {
		if !full && len(shown) > showTextLimit {
			cut := showTextLimit
			for cut > 0 && !utf8.RuneStart(shown[cut]) {
				cut--
			}
			shown = shown[:cut]
		}
		fmt.Fprintf(&b, "payload (%s, UTF-8 text):\n", plural(int64(len(payload)), "byte"))
		b.Write(shown)
		if len(shown) > 0 && shown[len(shown)-1] != '\n' {
			b.WriteByte('\n')
		}
	} else {
		if !full && len(shown) > showBinaryLimit {
			shown = shown[:showBinaryLimit]
		}
		fmt.Fprintf(&b, "payload (%s, not UTF-8 text: hex dump; --json gives it in base64):\n", plural(int64(len(payload)), "byte"))
		b.WriteString(hex.Dump(shown))
	}
	if len(shown) < len(payload) {
		fmt.Fprintf(&b, "… %s more (--full prints the whole payload)\n", plural(int64(len(payload)-len(shown)), "byte"))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// maskHeaders returns cols with the values of the credential-like headers
// of the headers column masked (sensitive.MaskHeaders, the rule the
// console's row page follows): a row shown is often pasted into a ticket.
// Whoever needs a value reads the table itself.
func maskHeaders(cols []driver.Column) []driver.Column {
	out := make([]driver.Column, len(cols))
	for i, c := range cols {
		if c.Name == "headers" {
			c.Value = sensitive.MaskHeaders(c.Value)
		}
		out[i] = c
	}
	return out
}

// textValue renders a column value on one line.
func textValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case string:
		return safeText(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	case []byte:
		return hex.EncodeToString(v)
	case map[string]any, []any:
		b, _ := json.Marshal(v)
		return string(b)
	default:
		return fmt.Sprint(v)
	}
}

// headerValue renders one stored header value: a string as itself (quoted
// when it holds control characters), {"base64": "…"} as such with a note.
func headerValue(v any) string {
	switch v := v.(type) {
	case string:
		return safeText(v)
	case map[string]any:
		if s, ok := v["base64"].(string); ok && len(v) == 1 {
			return "base64 " + s + " (not UTF-8 text, or holds a NUL byte)"
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// isText reports whether b can be printed as it is: valid UTF-8 without
// control characters other than newline, carriage return and tab (no
// terminal escape sequences, no NUL bytes).
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}

// safeText returns s as it is when it is printable on one line, else
// quoted with Go escapes, so that no value can move the cursor or forge a
// line of output (ops.SafeText).
func safeText(s string) string { return ops.SafeText(s) }
