package app

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/ingest/webhook"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/opfiles/webhookfile"
	"github.com/inboxd/inboxd/internal/ops"
)

// requeueFlags are the requeue command's flags.
type requeueFlags struct {
	filter         failedFilter
	dryRun         bool
	dropDuplicates bool
}

// runRequeue returns the dead rows the filter selects to received, or
// re-maps the rejected ones (--status rejected), and says what matched and
// what did not. It fails (exit 1) when nothing was requeued. It works in
// batches (failedBatch rows each, logging its progress on stderr); stopped
// half-way, it leaves what it requeued requeued, for a second run to do the
// rest.
func runRequeue(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, environ []string, f requeueFlags) error {
	if err := f.filter.parse("requeue", time.Now()); err != nil {
		return err
	}
	if err := f.filter.resolveOperator("requeue", cfg, environ); err != nil {
		return err
	}
	if f.dropDuplicates && f.filter.status != string(status.Rejected) {
		return usageError{errors.New("requeue: --drop-duplicates applies to --status rejected only")}
	}
	conn, err := connectSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	log := adminLog(cfg, stderr, "requeue")
	if f.filter.status == string(status.Rejected) {
		return requeueRejected(ctx, cfg, conn, stdout, log, f)
	}
	return requeueDead(ctx, conn, stdout, log, f)
}

// notifyTimeout bounds the wake-up sent after requeueing, even when the
// command was interrupted.
const notifyTimeout = 5 * time.Second

// notifyRequeued wakes the workers of every replica once, after n rows
// were requeued (also by a run that stopped half-way).
func notifyRequeued(ctx context.Context, conn *pgx.Conn, n int64) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyTimeout)
	defer cancel()
	if err := driver.Notify(ctx, conn); err != nil {
		return fmt.Errorf("requeue: %s requeued, but waking the workers failed (they find the rows at their next poll): %w",
			plural(n, "row"), err)
	}
	return nil
}

// requeueDead requeues the matching dead rows, batch after batch, and
// wakes the workers (ops.Requeue).
func requeueDead(ctx context.Context, conn *pgx.Conn, stdout io.Writer, log zerolog.Logger, f requeueFlags) error {
	o := newOps(conn, log, nil, nil)
	return changeRun{cmd: "requeue", noun: "dead row", done: "requeued", would: "would requeue", kept: "requeued",
		dryRun: f.dryRun, filter: &f.filter,
		all: func(matched map[int64]bool) (int64, error) {
			res, err := o.Requeue(ctx, ops.Request{Operator: f.filter.operator, Filter: f.filter.opsFilter(), DryRun: f.dryRun,
				Each: f.filter.visitor(stdout, "requeue", matched, func(r driver.FailedRow) string {
					return plural(int64(r.Attempts), "attempt")
				})})
			return res.Rows, err
		},
	}.run(ctx, conn, log, stdout)
}

// remapRules are the rules a rejected row is mapped again by: each kind
// of source's own (ingestcore.Remappers), built from the brokers' mapping
// settings and the webhook sources' file (no sources without
// INBOXD_WEBHOOK_SOURCES: a webhook source's row then stays rejected).
type remapRules struct {
	kinds ingestcore.Remappers
}

// rejectedRules reads the rules of cfg that rejected rows are mapped
// again by, the webhook sources file included (its secret files are not
// read: mapping a stored row needs no secret).
func rejectedRules(cfg config.Config) (remapRules, error) {
	var hooks []webhook.SourceConfig
	if cfg.WebhookSources != "" {
		var err error
		if hooks, err = webhookfile.Load(cfg.WebhookSources, false); err != nil {
			return remapRules{}, usageError{err}
		}
	}
	return remapRules{kinds: ingestcore.RemappersOf(remapSources(cfg, hooks)...)}, nil
}

// remapper is how ops maps a stored rejected row again: by the rule of
// the kind of source it came from (ingestcore.Remappers), or not at all
// when part of its message was not stored.
func (rules remapRules) remapper() ops.Remapper {
	return func(s driver.RejectedRow) ops.Mapped {
		if unstored := ingestcore.Unstored(s.LastError); len(unstored) > 0 {
			verb := "was"
			if len(unstored) > 1 || unstored[0] == "headers" {
				verb = "were"
			}
			return ops.Mapped{Refused: true, Outcome: ops.OutcomeOversize, Line: fmt.Sprintf("cannot be requeued: its %s %s not stored (%s); the event must be produced again",
				strings.Join(unstored, " and "), verb, oneLine(s.LastError, 200))}
		}
		stored, err := rejectedStored(s)
		if err != nil {
			return ops.Mapped{Refused: true, Outcome: ops.OutcomeStillRejected, Line: fmt.Sprintf("still rejected: %v", err)}
		}
		row := rules.kinds.Remap(stored) // by the rules of the row's own kind of source
		if row.Status != ingestcore.StatusReceived {
			return ops.Mapped{Refused: true, Outcome: ops.OutcomeStillRejected,
				Line: "still rejected with the current configuration: " + oneLine(row.LastError, 200)}
		}
		return ops.Mapped{EventID: row.EventID, EventType: row.EventType}
	}
}

// requeueRejected re-maps every matching rejected row with the current
// mapping configuration, one row at a time (a row that clashes must not
// stop the others), reading them a batch at a time (ops.Requeue).
func requeueRejected(ctx context.Context, cfg config.Config, conn *pgx.Conn, stdout io.Writer, log zerolog.Logger, f requeueFlags) error {
	rules, err := rejectedRules(cfg)
	if err != nil {
		return err
	}
	matched := make(map[int64]bool)
	o := newOps(conn, log, rules.remapper(), nil)
	res, err := o.Requeue(ctx, ops.Request{Operator: f.filter.operator, Filter: f.filter.opsFilter(), DryRun: f.dryRun,
		DropDuplicates: f.dropDuplicates, Each: func(v ops.Visit) {
			f.filter.mark(matched, v.ID)
			fmt.Fprintf(stdout, "id %d: %s\n", v.ID, v.Line)
		}})
	counts := res.Outcomes
	if err != nil {
		var notify *ops.NotifyError
		if errors.As(err, &notify) {
			return fmt.Errorf("requeue: %w", err)
		}
		if !f.dryRun {
			fmt.Fprintf(stdout, "requeued %d of %s before stopping\n", counts[ops.OutcomeRequeued], plural(res.Listed, "rejected row"))
		}
		return stoppedError("requeue", counts[ops.OutcomeRequeued], map[bool]string{true: "", false: "as re-mapped above"}[f.dryRun], err)
	}
	listed := res.Listed
	if err := printUnmatched(ctx, conn, stdout, &f.filter, matched); err != nil {
		return err
	}
	verb := "requeued"
	if f.dryRun {
		verb = "would requeue"
	}
	summary := fmt.Sprintf("%s %d of %s", verb, counts[ops.OutcomeRequeued], plural(listed, "rejected row"))
	var rest []string
	for _, o := range []struct {
		o    ops.RemapOutcome
		word string
	}{
		{ops.OutcomeDuplicate, "already in the inbox (left rejected)"},
		{ops.OutcomeDropped, "already in the inbox (deleted)"},
		{ops.OutcomeStillRejected, "still rejected"},
		{ops.OutcomeOversize, "oversize, not stored"},
		{ops.OutcomeGone, "no longer rejected"},
	} {
		if counts[o.o] > 0 {
			rest = append(rest, fmt.Sprintf("%d %s", counts[o.o], o.word))
		}
	}
	if len(rest) > 0 {
		summary += ": " + strings.Join(rest, ", ")
	}
	fmt.Fprintln(stdout, summary)
	switch {
	case listed == 0:
		return fmt.Errorf("requeue: %w: no rejected row matches %s", errNothingMatched, f.filter.describe())
	case counts[ops.OutcomeRequeued] == 0 && counts[ops.OutcomeDropped] == 0:
		return fmt.Errorf("requeue: %w: none of the %s could be requeued", errNothingMatched, plural(listed, "matching rejected row"))
	}
	return nil
}

// rejectedStored is the rejected row s as the remap rules read it: its
// source (its kafka_topic when it has one), event id, key, payload,
// headers with {"base64": "…"} values decoded, and its Kafka position
// (zeros for a row that did not come from Kafka).
func rejectedStored(s driver.RejectedRow) (ingestcore.Stored, error) {
	st := ingestcore.Stored{Source: s.Source, EventID: s.EventID, Key: s.Key, Payload: s.Payload}
	if s.Topic != nil {
		st.Source = *s.Topic
	}
	if s.Partition != nil {
		st.Partition = int(*s.Partition)
	}
	if s.Offset != nil {
		st.Offset = *s.Offset
	}
	hs, err := decodeHeaders([]byte(s.Headers))
	if err != nil {
		return ingestcore.Stored{}, err
	}
	st.Headers = hs
	return st, nil
}

// decodeHeaders turns the headers column back into headers: a string
// value is the header's bytes, {"base64": "…"} is decoded, any other JSON
// value (written by hand) is taken as its JSON text. Names are sorted, so
// the result does not depend on jsonb's key order (ingest keeps the last
// value of a repeated name, so each name is there once).
func decodeHeaders(raw []byte) ([]ingestcore.Header, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("headers are not a JSON object: %v", err)
	}
	names := make([]string, 0, len(obj))
	for name := range obj {
		names = append(names, name)
	}
	sort.Strings(names)
	hs := make([]ingestcore.Header, 0, len(names))
	for _, name := range names {
		v := obj[name]
		var str string
		if err := json.Unmarshal(v, &str); err == nil {
			hs = append(hs, ingestcore.Header{Key: name, Value: []byte(str)})
			continue
		}
		var b64 map[string]string
		if err := json.Unmarshal(v, &b64); err == nil && len(b64) == 1 {
			if enc, ok := b64["base64"]; ok {
				dec, err := base64.StdEncoding.DecodeString(enc)
				if err != nil {
					return nil, fmt.Errorf("header %s: bad base64 value: %v", safeText(name), err)
				}
				hs = append(hs, ingestcore.Header{Key: name, Value: dec})
				continue
			}
		}
		hs = append(hs, ingestcore.Header{Key: name, Value: []byte(v)})
	}
	return hs, nil
}
