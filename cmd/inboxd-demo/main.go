// Command inboxd-demo shows inboxd end to end on one machine: it starts an
// embedded Kafka-protocol broker (franz-go's kfake), creates a demo database
// on the local PostgreSQL, runs the inboxd daemon against both, serves an
// HTTP sink for the daemon to deliver to, produces a few thousand sample
// events — duplicates, an unknown event type, a malformed message and one
// the sink refuses with 422 — and prints progress and a summary.
//
// With --source rabbitmq or --source nats the same events go through a
// queue of the demo's own on the RabbitMQ server of INBOXD_DEMO_AMQP_URL
// (default amqp://guest:guest@127.0.0.1:5672/), or a stream of its own on
// the NATS JetStream server of INBOXD_DEMO_NATS_URL (default
// nats://127.0.0.1:4222), deleted at the end.
//
// Run it with `make demo` (`make demo SOURCE=rabbitmq`, `SOURCE=nats`;
// `KEEP=1` keeps it running with the console open). The PostgreSQL server
// is taken from INBOXD_DEMO_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres). The demo database
// (inboxd_demo, or --database) is created and marked as the demo's with a
// comment; the next run drops and recreates a database so marked, and
// refuses to touch one that is not.
//
// Two more commands help a real run along (docs/getting-started.md):
//
//	inboxd-demo send --source kafka|rabbitmq|nats|webhook …   test events to a running inboxd
//	inboxd-demo kafka [--port 9092]                            an embedded Kafka-protocol broker, until Ctrl-C
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/cmd/inboxd/app"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

const (
	topic           = "orders"
	defaultDatabase = "inboxd_demo"
	refusedID       = "order-00422" // the sink answers 422 for this one
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// plan is what the demo sends and what it expects to come out.
type plan struct {
	orders     int // unique order.created events
	duplicates int // order.created events sent a second time
	audits     int // order.audited events, routed to ignore
}

func (p plan) sent() int   { return p.orders + p.duplicates + p.audits + 2 } // + unknown type + malformed
func (p plan) unique() int { return p.orders + p.audits + 2 }

func run(ctx context.Context, args []string, out io.Writer) (err error) {
	if len(args) > 0 {
		switch args[0] {
		case "send":
			return runSend(ctx, args[1:], out)
		case "kafka":
			return runKafka(ctx, args[1:], out)
		}
	}
	fs := flag.NewFlagSet("inboxd-demo", flag.ContinueOnError)
	nEvents := fs.Int("events", 3000, "unique order events to send")
	kind := fs.String("source", "kafka", "broker the events go through: "+strings.Join(sources, ", "))
	dbName := fs.String("database", defaultDatabase, "demo database to create (a database of that name is dropped first only if an earlier demo run created it)")
	keep := fs.Bool("keep", false, "after the summary, keep the daemon running with the console open until Ctrl-C")
	httpAddr := fs.String("http", "127.0.0.1:8080", "where the daemon serves the console and /metrics (another free port on 127.0.0.1 when this one is taken)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nEvents < 500 {
		return errors.New("--events must be at least 500")
	}
	if !slices.Contains(sources, *kind) {
		return fmt.Errorf("--source %q: use one of %s", *kind, strings.Join(sources, ", "))
	}
	p := plan{orders: *nEvents, duplicates: *nEvents / 10, audits: *nEvents / 20}

	adminURL := os.Getenv("INBOXD_DEMO_DATABASE_URL")
	if adminURL == "" {
		adminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	if !validName.MatchString(*dbName) {
		return fmt.Errorf("--database %q: use lower-case letters, digits and _", *dbName)
	}
	dbURL, err := createDatabase(ctx, adminURL, *dbName, out)
	if err != nil {
		return err
	}

	src, err := openSource(ctx, *kind, out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := src.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	snk, err := startSink()
	if err != nil {
		return err
	}
	defer snk.server.Close()
	fmt.Fprintf(out, "sink       HTTP sink at %s (answers 422 for %s)\n", snk.url, refusedID)

	dir, err := os.MkdirTemp("", "inboxd-demo-")
	if err != nil {
		return err
	}
	routes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte(fmt.Sprintf(`routes:
  - type: order.created
    handler: http
    url: %s/hooks/inbox
    timeout: 5s
  - type: order.audited
    handler: ignore
default: dead
`, snk.url)), 0o600); err != nil {
		return err
	}
	tokenPath := filepath.Join(dir, "ui.token")
	token := make([]byte, 12)
	_, _ = rand.Read(token)
	if err := os.WriteFile(tokenPath, []byte(hex.EncodeToString(token)+"\n"), 0o600); err != nil {
		return err
	}
	addr, err := freeAddr(*httpAddr)
	if err != nil {
		return err
	}
	logPath := filepath.Join(dir, "inboxd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()

	env := append(os.Environ(), src.env()...)
	env = append(env,
		"INBOXD_DATABASE_URL="+dbURL,
		"INBOXD_ROUTES="+routes,
		"INBOXD_HTTP_ADDR="+addr,
		"INBOXD_UI_TOKEN_FILE="+tokenPath,
		"INBOXD_LOG_FORMAT=json",
		"INBOXD_WORKERS=64",
		"INBOXD_BACKOFF_BASE=100ms",
		"INBOXD_BACKOFF_MAX=2s",
		"INBOXD_SHUTDOWN_TIMEOUT=5s",
	)
	if code := app.Main(ctx, []string{"migrate"}, env, io.Discard, logFile, app.Options{}); code != 0 {
		return fmt.Errorf("inboxd migrate failed (exit %d); see %s", code, logPath)
	}
	daemonCtx, stopDaemon := context.WithCancel(ctx)
	defer stopDaemon()
	daemonDone := make(chan int, 1)
	go func() { daemonDone <- app.Main(daemonCtx, []string{"run"}, env, io.Discard, logFile, app.Options{}) }()
	fmt.Fprintf(out, "inboxd     running (logs: %s)\n", logPath)

	db, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.Close()

	sentCh := make(chan error, 1)
	var sent counter
	go func() { sentCh <- src.publish(ctx, events(p), &sent) }()

	// On a terminal, progress rewrites one line; otherwise one line a tick.
	lineStart := "\n"
	if f, ok := out.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			lineStart = "\r"
		}
	}
	start := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var st stats
	produced := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case code := <-daemonDone:
			return fmt.Errorf("inboxd stopped unexpectedly (exit %d); see %s", code, logPath)
		case err := <-sentCh:
			if err != nil {
				return fmt.Errorf("produce: %w", err)
			}
			produced = true
			sentCh = nil
		case <-tick.C:
		}
		if st, err = readStats(ctx, db); err != nil {
			return err
		}
		fmt.Fprintf(out, lineStart+"%5.1fs  sent %5d  in inbox %5d  processed %5d  dead %d  rejected %d  pending %5d ",
			time.Since(start).Seconds(), sent.get(), st.total, st.processed, st.dead, st.rejected, st.pending)
		if produced && st.total == int64(p.unique()) && st.pending == 0 {
			break
		}
		if time.Since(start) > 2*time.Minute {
			return fmt.Errorf("not finished after 2 minutes; see %s", logPath)
		}
	}
	elapsed := time.Since(start)
	fmt.Fprintln(out)

	deliveries, keys := snk.counts()
	fmt.Fprintf(out, `
summary (%.1fs)
  sent to %-14s %6d  (%d order.created, %d of them sent twice, %d order.audited,
                                 1 unknown type, 1 %s)
  unique rows in inbox   %6d
  processed              %6d  (order.created delivered to the sink, order.audited ignored)
  dead                   %6d  (the sink's 422 for %s, and the unknown event type)
  rejected               %6d  (the message %s)
  duplicates absorbed    %6d  (sent - unique rows)
  sink deliveries        %6d  for %d distinct Idempotency-Keys

`, elapsed.Seconds(), src.name(), sent.get(), p.orders, p.duplicates, p.audits, src.malformed(),
		st.total, st.processed, st.dead, refusedID, st.rejected, src.malformed(), int64(sent.get())-st.total, deliveries, keys)

	failed, err := failedRows(ctx, db)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "dead and rejected rows:")
	for _, f := range failed {
		fmt.Fprintf(out, "  %-8s %-18s %-18q %s\n", f.Status, f.EventID, f.EventType, f.LastError)
	}

	want := stats{total: int64(p.unique()), processed: int64(p.orders - 1 + p.audits), dead: 2, rejected: 1}
	if sent.get() != p.sent() || st.total != want.total || st.processed != want.processed || st.dead != want.dead || st.rejected != want.rejected {
		return fmt.Errorf("unexpected outcome: got %+v, want %+v", st, want)
	}
	fmt.Fprintln(out, "\nall as expected: every unique event handled once in the inbox, duplicates absorbed, bad input kept with a reason.")

	cli := fmt.Sprintf("INBOXD_DATABASE_URL='%s' bin/inboxd", dbURL)
	fmt.Fprintf(out, "\nthe database %s stays until the next demo run; look at it with the CLI (make build: bin/inboxd):\n", *dbName)
	fmt.Fprintf(out, "  %s stats\n  %s dead\n  %s requeue --type order.teleported --dry-run\n", cli, cli, cli)
	if !*keep {
		fmt.Fprintln(out, "make demo KEEP=1 (or --keep) keeps the daemon running with its console open.")
		return stopAndWait(stopDaemon, daemonDone, logPath)
	}
	fmt.Fprintf(out, "\nthe daemon keeps running (Ctrl-C stops it; the database stays):\n")
	fmt.Fprintf(out, "  console  http://%s/ui/   token %s (its file: %s)\n", addr, hex.EncodeToString(token), tokenPath)
	fmt.Fprintf(out, "  metrics  http://%s/metrics\n  logs     %s\n", addr, logPath)
	select {
	case <-ctx.Done():
	case code := <-daemonDone:
		return fmt.Errorf("inboxd stopped unexpectedly (exit %d); see %s", code, logPath)
	}
	fmt.Fprintln(out, "\nstopping")
	return stopAndWait(stopDaemon, daemonDone, logPath)
}

// stopAndWait stops the demo's daemon and waits for it to exit cleanly.
func stopAndWait(stop func(), done <-chan int, logPath string) error {
	stop()
	if code := <-done; code != 0 {
		return fmt.Errorf("inboxd exited %d on shutdown; see %s", code, logPath)
	}
	return nil
}

// freeAddr returns preferred when it can be listened on, else a free port
// on 127.0.0.1.
func freeAddr(preferred string) (string, error) {
	ln, err := net.Listen("tcp", preferred)
	if err != nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return "", err
		}
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

var validName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// failedRows returns the dead and rejected rows in id order.
func failedRows(ctx context.Context, db *pgxpool.Pool) ([]driver.FailedRow, error) {
	var all []driver.FailedRow
	for _, st := range status.Failed {
		rows, err := driver.MatchFailed(ctx, db, driver.FailedFilter{Status: st}, 0, math.MaxInt64)
		if err != nil {
			return nil, err
		}
		all = append(all, rows...)
	}
	slices.SortFunc(all, func(a, b driver.FailedRow) int { return cmp.Compare(a.ID, b.ID) })
	return all, nil
}

type stats struct {
	total, processed, dead, rejected, pending int64
}

func readStats(ctx context.Context, db *pgxpool.Pool) (stats, error) {
	counts, err := driver.StatusCounts(ctx, db)
	if err != nil {
		return stats{}, err
	}
	s := stats{
		processed: counts[status.Processed],
		dead:      counts[status.Dead],
		rejected:  counts[status.Rejected],
		pending:   counts[status.Received] + counts[status.Processing],
	}
	for _, n := range counts {
		s.total += n
	}
	return s, nil
}

// demoMarker is the comment the demo puts on the database it creates: the
// only kind of database it ever drops.
const demoMarker = "created by inboxd-demo: the next demo run drops and recreates it"

// createDatabase creates the demo database, marked as the demo's, and
// returns its URL. A database of that name that an earlier demo run
// created (marked) is dropped first; one that is not marked is left alone,
// and the demo stops, saying why.
func createDatabase(ctx context.Context, adminURL, name string, out io.Writer) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL at %s (is it running? set INBOXD_DEMO_DATABASE_URL): %w", hostOf(adminURL), err)
	}
	defer conn.Close(ctx)
	var comment *string
	err = conn.QueryRow(ctx, `SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1`, name).Scan(&comment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return "", fmt.Errorf("look for database %s: %w", name, err)
	case comment == nil || *comment != demoMarker:
		return "", fmt.Errorf("database %s exists and no demo run created it (it lacks the comment %q): "+
			"the demo drops only databases it created; give another name with --database, or drop %s yourself", name, demoMarker, name)
	default:
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			return "", fmt.Errorf("drop the demo database of an earlier run: %w", err)
		}
		fmt.Fprintf(out, "database   dropped %s, which an earlier demo run created\n", name)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create demo database: %w", err)
	}
	if _, err := conn.Exec(ctx, "COMMENT ON DATABASE "+name+" IS '"+demoMarker+"'"); err != nil {
		return "", fmt.Errorf("mark the demo database: %w", err)
	}
	fmt.Fprintf(out, "database   %s created on %s, marked as the demo's (only a database so marked is ever dropped)\n", name, hostOf(adminURL))
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", fmt.Errorf("INBOXD_DEMO_DATABASE_URL must be a postgres:// URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func hostOf(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Host
}

// sink is the demo's stand-in for the service behind inboxd.
type sink struct {
	server *http.Server
	url    string
	mu     sync.Mutex
	total  int
	keys   map[string]int
}

func startSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{url: "http://" + ln.Addr().String(), keys: make(map[string]int)}
	s.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		s.mu.Lock()
		s.total++
		s.keys[key]++
		s.mu.Unlock()
		if r.Header.Get("Inbox-Event-Id") == refusedID {
			http.Error(w, `{"error":"order total does not match its lines"}`, http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = s.server.Serve(ln) }()
	return s, nil
}

func (s *sink) counts() (deliveries, keys int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, len(s.keys)
}

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) add(n int) { c.mu.Lock(); c.n += n; c.mu.Unlock() }
func (c *counter) get() int  { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
