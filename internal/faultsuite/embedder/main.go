// Command embedder runs the inboxd daemon through its Go API (app.Main with
// app.Options{Registry: reg}), the way a service embeds it, with two Go
// handlers whose side effects the fault-injection suite can audit:
//
//   - tx.effect, a transactional handler (handlers.TxHandler): it inserts
//     (event_id, source, attempt, pid, at) into the table effects, which has
//     no unique constraint, inside the transaction that marks the row
//     processed, and may then sleep FAULT_TX_SLEEP holding that
//     transaction open. A committed effect row per event is the
//     effectively-once guarantee; two rows for one event id are a
//     duplicate.
//   - batch.effect, a transactional batch handler (handlers.TxBatchHandler,
//     batches of up to 100 rows waiting at most 20ms): it inserts the
//     effects of a batch's rows that do not fail (FAULT_FAIL_RATE, drawn per
//     row: those fail on their own, handlers.RowErrors, and write nothing)
//     in one statement inside the transaction that writes every row's
//     outcome.
//   - obatch.effect, the same on an ordered route (on_dead: block): each key's
//     effects must commit in arrival order.
//   - http.effect, a plain handler (at-least-once): it POSTs the payload to
//     FAULT_SINK_URL with the built-in http handler, so the request carries
//     the event id as Idempotency-Key, like an http route.
//   - outbox.effect, a transactional handler on an ordered route
//     (consume → process → produce): inside the row's transaction it inserts
//     its effect as tx.effect does and writes one outbox message with
//     inboxd.Emit: destination FAULT_OUTBOX_DEST, type out.effect, the event
//     id left to the database (a UUID, so a second committed run would show
//     as a second distinct id downstream), the input's key, the header
//     input_id = the input's event id, and the input's payload.
//
// Configuration, besides the daemon's own INBOXD_* variables:
//
//	FAULT_SINK_URL     where http.effect POSTs (required for that type to succeed)
//	FAULT_TX_SLEEP     how long tx.effect holds its transaction after the insert (Go duration, default 0)
//	FAULT_HTTP_SLEEP   how long http.effect waits before its request (default 0)
//	FAULT_OUTBOX_DEST  the outbox destination of outbox.effect (kafka:<topic>, amqp:<exchange>/<key>, nats:<subject>)
//	FAULT_FAIL_RATE    fraction (0..1) of attempts of any type that fail with a retryable error
//	                   (tx.effect and outbox.effect fail after their writes, so those are rolled back)
//	FAULT_EXIT_EVENT   when set, the handler of the row with this event id (either type) ends the
//	                   process with os.Exit(ExitHandlerKilled) once it recorded its run, as a Go fatal
//	                   error, an OOM kill or a log.Fatal in a library would
//	FAULT_RUNS_FILE    when set, every handler invocation appends a line
//	                   "<event_type> <event_id> <attempt> <pid>" to this file (O_APPEND, one write per
//	                   line, so the lines of several processes interleave whole and survive SIGKILL)
//
// The effects table is created at start-up when missing. Signals are handled
// exactly as cmd/inboxd's main does (app.SignalContext).
package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/cmd/inboxd/app"
	"github.com/inboxd/inboxd/handlers"
)

// effectsDDL creates the audit table; deliberately without a unique
// constraint, so a duplicate effect is stored and can be counted. tx is
// the transaction that wrote the effect: the rows of one batch share it.
const effectsDDL = `CREATE TABLE IF NOT EXISTS effects (
    event_id text        NOT NULL,
    source   text        NOT NULL,
    attempt  integer     NOT NULL,
    pid      integer     NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    tx       bigint      NOT NULL DEFAULT txid_current()
)`

func main() {
	ctx, stop := app.SignalContext(context.Background(), os.Stderr)
	code := run(ctx)
	stop()
	os.Exit(code)
}

func run(ctx context.Context) int {
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedder:", err)
		return app.ExitUsage
	}
	if len(os.Args) > 1 && os.Args[1] == "run" {
		if err := ensureEffects(ctx, os.Getenv("INBOXD_DATABASE_URL")); err != nil {
			fmt.Fprintln(os.Stderr, "embedder: create effects table:", err)
			return app.ExitFailure
		}
	}
	reg := handlers.NewRegistry()
	if err := reg.HandleTx("tx.effect", handlers.TxHandlerFunc(cfg.txEffect)); err != nil {
		fmt.Fprintln(os.Stderr, "embedder:", err)
		return app.ExitFailure
	}
	if err := reg.HandleTx("outbox.effect", handlers.TxHandlerFunc(cfg.outboxEffect), handlers.Ordered(handlers.OnDeadBlock)); err != nil {
		fmt.Fprintln(os.Stderr, "embedder:", err)
		return app.ExitFailure
	}
	if err := reg.HandleTxBatch("batch.effect", handlers.TxBatchHandlerFunc(cfg.batchEffect),
		handlers.Batching(100, 0, 20*time.Millisecond)); err != nil {
		fmt.Fprintln(os.Stderr, "embedder:", err)
		return app.ExitFailure
	}
	if err := reg.HandleTxBatch("obatch.effect", handlers.TxBatchHandlerFunc(cfg.batchEffect),
		handlers.Batching(100, 0, 20*time.Millisecond), handlers.Ordered(handlers.OnDeadBlock)); err != nil {
		fmt.Fprintln(os.Stderr, "embedder:", err)
		return app.ExitFailure
	}
	if err := reg.Handle("http.effect", handlers.HandlerFunc(cfg.httpEffect)); err != nil {
		fmt.Fprintln(os.Stderr, "embedder:", err)
		return app.ExitFailure
	}
	return app.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, app.Options{Registry: reg})
}

// ExitHandlerKilled is the exit status of a process that the handler of
// FAULT_EXIT_EVENT ended.
const ExitHandlerKilled = 3

// config is the embedder's FAULT_* configuration.
type config struct {
	exitOn    string // FAULT_EXIT_EVENT
	txSleep   time.Duration
	httpSleep time.Duration
	failRate  float64
	outboxTo  string           // FAULT_OUTBOX_DEST
	http      handlers.Handler // nil without FAULT_SINK_URL
	runs      *os.File         // nil without FAULT_RUNS_FILE
	runsMu    sync.Mutex
	pid       int
}

func loadConfig() (*config, error) {
	c := &config{pid: os.Getpid(), exitOn: os.Getenv("FAULT_EXIT_EVENT"), outboxTo: os.Getenv("FAULT_OUTBOX_DEST")}
	var errs []error
	dur := func(name string) time.Duration {
		v := os.Getenv(name)
		if v == "" {
			return 0
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("%s: not a non-negative duration: %q", name, v))
		}
		return d
	}
	c.txSleep = dur("FAULT_TX_SLEEP")
	c.httpSleep = dur("FAULT_HTTP_SLEEP")
	if v := os.Getenv("FAULT_FAIL_RATE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1 {
			errs = append(errs, fmt.Errorf("FAULT_FAIL_RATE: want a number between 0 and 1, got %q", v))
		}
		c.failRate = f
	}
	if u := os.Getenv("FAULT_SINK_URL"); u != "" {
		h, err := handlers.NewHTTP(handlers.HTTPConfig{URL: u, Timeout: 30 * time.Second})
		if err != nil {
			errs = append(errs, fmt.Errorf("FAULT_SINK_URL: %w", err))
		}
		c.http = h
	}
	if p := os.Getenv("FAULT_RUNS_FILE"); p != "" {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			errs = append(errs, fmt.Errorf("FAULT_RUNS_FILE: %w", err))
		}
		c.runs = f
	}
	return c, errors.Join(errs...)
}

// recordRun appends one line per handler invocation to the runs file, and
// ends the process on FAULT_EXIT_EVENT's row.
func (c *config) recordRun(ev *handlers.Event) {
	if c.runs != nil {
		line := fmt.Sprintf("%s %s %d %d\n", ev.EventType, ev.EventID, ev.Attempt, c.pid)
		c.runsMu.Lock()
		_, _ = c.runs.WriteString(line)
		c.runsMu.Unlock()
	}
	if c.exitOn != "" && ev.EventID == c.exitOn {
		os.Exit(ExitHandlerKilled)
	}
}

// injectFailure reports whether this attempt should fail on purpose.
func (c *config) injectFailure() bool {
	return c.failRate > 0 && rand.Float64() < c.failRate
}

// txEffect is the transactional handler of tx.effect.
func (c *config) txEffect(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
	c.recordRun(ev)
	if _, err := tx.Exec(ctx,
		`INSERT INTO effects (event_id, source, attempt, pid) VALUES ($1, $2, $3, $4)`,
		ev.EventID, ev.Source, ev.Attempt, c.pid); err != nil {
		return fmt.Errorf("insert effect: %w", err)
	}
	if c.txSleep > 0 {
		t := time.NewTimer(c.txSleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
	if c.injectFailure() {
		return errors.New("injected failure (FAULT_FAIL_RATE)")
	}
	return nil
}

// outboxEffect is the transactional handler of outbox.effect: the effect
// and the outbox message commit with the row's move to processed, or not at
// all.
func (c *config) outboxEffect(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
	c.recordRun(ev)
	if c.outboxTo == "" {
		return handlers.Permanent(errors.New("FAULT_OUTBOX_DEST is not set"))
	}
	if _, err := tx.Exec(ctx,
		`INSERT INTO effects (event_id, source, attempt, pid) VALUES ($1, $2, $3, $4)`,
		ev.EventID, ev.Source, ev.Attempt, c.pid); err != nil {
		return fmt.Errorf("insert effect: %w", err)
	}
	if _, err := inboxd.Emit(ctx, tx, inboxd.OutboxMessage{
		Destination: c.outboxTo, EventType: "out.effect", Key: string(ev.Key),
		Headers: map[string]string{"input_id": ev.EventID}, Payload: ev.Payload,
	}); err != nil {
		return fmt.Errorf("emit: %w", err)
	}
	if c.injectFailure() {
		return errors.New("injected failure (FAULT_FAIL_RATE)")
	}
	return nil
}

// batchEffect is the transactional batch handler of batch.effect and
// obatch.effect: the effects of the rows that succeed, in one statement,
// commit with every row's outcome.
func (c *config) batchEffect(ctx context.Context, tx pgx.Tx, evs []*handlers.Event) error {
	var ids, sources []string
	var attempts []int32
	errs := make(handlers.RowErrors, len(evs))
	failed := false
	for i, ev := range evs {
		c.recordRun(ev)
		if c.injectFailure() {
			errs[i], failed = errors.New("injected failure (FAULT_FAIL_RATE)"), true
			continue
		}
		ids, sources, attempts = append(ids, ev.EventID), append(sources, ev.Source), append(attempts, int32(ev.Attempt))
	}
	if _, err := tx.Exec(ctx,
		`INSERT INTO effects (event_id, source, attempt, pid)
		 SELECT e.id, e.source, e.attempt, $4 FROM unnest($1::text[], $2::text[], $3::int[]) AS e(id, source, attempt)`,
		ids, sources, attempts, c.pid); err != nil {
		return fmt.Errorf("insert effects: %w", err)
	}
	if failed {
		return errs
	}
	return nil
}

// httpEffect is the plain handler of http.effect.
func (c *config) httpEffect(ctx context.Context, ev *handlers.Event) error {
	c.recordRun(ev)
	if c.httpSleep > 0 {
		t := time.NewTimer(c.httpSleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
	if c.injectFailure() {
		return errors.New("injected failure (FAULT_FAIL_RATE)")
	}
	if c.http == nil {
		return errors.New("FAULT_SINK_URL is not set")
	}
	return c.http.Handle(ctx, ev)
}

// ensureEffects creates the effects table if it is missing, retrying while
// the database is not reachable yet. Replicas starting together serialise on
// an advisory lock (CREATE TABLE IF NOT EXISTS alone can race).
func ensureEffects(ctx context.Context, url string) error {
	if url == "" {
		return nil // the daemon reports the missing setting itself
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := createEffects(ctx, url)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func createEffects(ctx context.Context, url string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return pgx.BeginFunc(cctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(cctx, `SELECT pg_advisory_xact_lock(727270777)`); err != nil {
			return err
		}
		_, err := tx.Exec(cctx, effectsDDL)
		return err
	})
}
