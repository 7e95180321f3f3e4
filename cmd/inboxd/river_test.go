package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/handlers/riverjob"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// paymentCaptured is the args type of a River worker in another service:
// riverjob.EventArgs under the route's kind.
type paymentCaptured struct{ riverjob.EventArgs }

func (paymentCaptured) Kind() string { return "payment_captured" }

// paymentWorker counts the jobs it works by event id and checks their args.
type paymentWorker struct {
	river.WorkerDefaults[paymentCaptured]
	mu     sync.Mutex
	worked map[string]int
	bad    []string
}

func (w *paymentWorker) Work(_ context.Context, job *river.Job[paymentCaptured]) error {
	a := job.Args
	w.mu.Lock()
	defer w.mu.Unlock()
	w.worked[a.EventID]++
	var n int
	if _, err := fmt.Sscanf(a.EventID, "pay-%05d", &n); err != nil {
		w.bad = append(w.bad, fmt.Sprintf("job %d: event id %q", job.ID, a.EventID))
		return nil
	}
	wantPayload, wantJSON := riverPayload(n)
	gotPayload := a.PayloadBytes()
	if wantJSON {
		var got, want any
		if err := json.Unmarshal(gotPayload, &got); err != nil || json.Unmarshal(wantPayload, &want) != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			w.bad = append(w.bad, fmt.Sprintf("%s: payload %s, want the JSON %s", a.EventID, gotPayload, wantPayload))
		}
	} else if !bytes.Equal(gotPayload, wantPayload) || a.Payload != nil {
		w.bad = append(w.bad, fmt.Sprintf("%s: payload %q (json %s), want base64 of %q", a.EventID, gotPayload, a.Payload, wantPayload))
	}
	if a.EventType != "payment.captured" || a.Source != "payments" || string(a.Key) != riverKey(n) {
		w.bad = append(w.bad, fmt.Sprintf("%s: type %q source %q key %q", a.EventID, a.EventType, a.Source, a.Key))
	}
	return nil
}

func (w *paymentWorker) snapshot() (worked map[string]int, bad []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	worked = make(map[string]int, len(w.worked))
	for k, v := range w.worked {
		worked[k] = v
	}
	return worked, append([]string(nil), w.bad...)
}

// riverPayload is event n's payload: JSON, except every fifth, which is
// binary.
func riverPayload(n int) (payload []byte, isJSON bool) {
	if n%5 == 0 {
		return []byte(fmt.Sprintf("\x00\xffbinary-%d", n)), false
	}
	return []byte(fmt.Sprintf(`{"n": %d, "currency": "EUR"}`, n)), true
}

func riverKey(n int) string { return fmt.Sprintf("order-%d", n%50) }

func riverRecord(n int) *kgo.Record {
	payload, _ := riverPayload(n)
	return &kgo.Record{Key: []byte(riverKey(n)), Value: payload, Headers: []kgo.RecordHeader{
		{Key: "event_id", Value: []byte(fmt.Sprintf("pay-%05d", n))},
		{Key: "event_type", Value: []byte("payment.captured")},
	}}
}

// Kafka → inbox → River through the real binary (built with -race), with a
// real River client working the jobs in this process: every unique event
// becomes exactly one River job, worked once, across duplicate deliveries
// in the stream, a SIGKILL of the daemon in the middle of it (the restarted
// daemon reads again from the last committed offsets, and the rows whose
// transaction died with the process, job insert included, are rescued and
// retried) and a redelivery of processed events after the restart.
func TestRiverRouteEffectivelyOnceAcrossSIGKILL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	db := pgtest.New(t)

	migrate := exec.Command(binary, "migrate", "--river")
	migrate.Env = append(os.Environ(), "INBOXD_DATABASE_URL="+db.URL)
	if out, err := migrate.CombinedOutput(); err != nil || !strings.Contains(string(out), "River schema migrated from version 0 to") {
		t.Fatalf("inboxd migrate --river: %v\n%s", err, out)
	}

	worker := &paymentWorker{worked: make(map[string]int)}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
		Workers: workers,
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if err := rc.Stop(sctx); err != nil {
			t.Errorf("stop the River client: %v", err)
		}
	}()

	cluster, cl := kafkaEnv(t, 4, "payments")
	routes := writeRoutes(t, "routes:\n  - type: payment.captured\n    handler: river\n    kind: payment_captured\n")
	env := kafkaDaemonEnv(db, cluster, "payments", routes)
	d := startDaemon(t, env...)

	// A steady stream of n unique events; every batch after the first
	// also carries ten events of the batch before it again.
	const n, batch = 4000, 100
	var produced, sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		pace := time.NewTicker(20 * time.Millisecond)
		defer pace.Stop()
		for start := 0; start < n; start += batch {
			<-pace.C
			var recs []*kgo.Record
			for i := start; i < start+batch; i++ {
				recs = append(recs, riverRecord(i))
			}
			if start > 0 {
				for i := start - batch; i < start-batch+10; i++ {
					recs = append(recs, riverRecord(i))
				}
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				done <- err
				return
			}
			produced.Add(batch)
			sent.Add(int64(len(recs)))
		}
		done <- nil
	}()

	jobsCommitted := func() int {
		var c int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'payment_captured'`).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	waitFor(t, 60*time.Second, "stream under way with jobs enqueued", func() bool {
		return produced.Load() >= n/4 && jobsCommitted() > 0
	})
	d.Kill()
	if produced.Load() == n {
		t.Fatal("the producer had finished before the kill: not a mid-stream kill")
	}
	startDaemon(t, env...)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Processed events delivered again after the restart.
	var again []*kgo.Record
	for i := 0; i < n; i += 40 {
		again = append(again, riverRecord(i))
	}
	produce(t, cl, again...)
	total := sent.Load() + int64(len(again))

	waitForCommitted(t, cluster, "it", "payments", total)
	waitFor(t, 90*time.Second, "every event processed", func() bool { return countStatus(t, db, "processed") == n })
	waitFor(t, 90*time.Second, "every job worked", func() bool {
		var c int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c >= n
	})

	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Fatalf("inbox has %d rows, want %d", rows, n)
	}
	var retried int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE attempts > 1`).Scan(&retried); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages sent for %d events; %d rows took more than one attempt (their first died with the daemon)", total, n, retried)
	// Once every row is processed no job can be added (a row is marked,
	// with its job, once), so these counts are final.
	type dup struct {
		EventID string
		Jobs    int
	}
	r, err := db.Pool.Query(ctx, `SELECT args->>'event_id', count(*) FROM river_job GROUP BY 1 HAVING count(*) > 1 ORDER BY 1 LIMIT 10`)
	if err != nil {
		t.Fatal(err)
	}
	dups, err := pgx.CollectRows(r, pgx.RowToStructByPos[dup])
	if err != nil {
		t.Fatal(err)
	}
	if len(dups) > 0 {
		t.Fatalf("events with more than one job: %+v", dups)
	}
	if got := jobsCommitted(); got != n {
		t.Fatalf("%d jobs, want %d (one per unique event)", got, n)
	}
	worked, bad := worker.snapshot()
	if len(bad) > 0 {
		t.Fatalf("%d jobs with wrong args, first: %s", len(bad), strings.Join(bad[:min(5, len(bad))], "; "))
	}
	for i := range n {
		id := fmt.Sprintf("pay-%05d", i)
		if worked[id] != 1 {
			t.Fatalf("%s worked %d times, want 1", id, worked[id])
		}
	}
	if len(worked) != n {
		t.Fatalf("%d events worked, want %d", len(worked), n)
	}
}

// SIGHUP can add a river route: refused, with the fix named, while River's
// schema is missing; taken once `inboxd migrate --river` has run, and its
// events then become jobs.
func TestSIGHUPAddsRiverRoute(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	routes := writeRoutes(t, "default: ignore\n")
	d := startDaemon(t, "INBOXD_DATABASE_URL="+db.URL, "INBOXD_ROUTES="+routes)
	withRiver := "routes:\n  - type: payment.captured\n    handler: river\n    kind: payment_captured\n    queue: payments\n"
	if err := os.WriteFile(routes, []byte(withRiver), 0o600); err != nil {
		t.Fatal(err)
	}
	hup := func() {
		t.Helper()
		d.Signal(syscall.SIGHUP)
	}
	hup()
	waitFor(t, 10*time.Second, "refusal logged", func() bool { return strings.Contains(d.Logs(), "routes not reloaded") })
	if !strings.Contains(d.Logs(), "inboxd migrate --river") {
		t.Fatalf("the refusal does not name the fix:\n%s", d.Logs())
	}

	migrate := exec.Command(binary, "migrate", "--river")
	migrate.Env = append(os.Environ(), "INBOXD_DATABASE_URL="+db.URL)
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("inboxd migrate --river: %v\n%s", err, out)
	}
	hup()
	waitFor(t, 10*time.Second, "reload logged", func() bool { return strings.Contains(d.Logs(), "routes reloaded") })
	if _, err := db.Pool.Exec(context.Background(),
		`INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('payments', 'p-1', 'payment.captured', '{"amount": 10}')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "row processed", func() bool { s, _ := rowStatus(t, db, "p-1"); return s == "processed" })
	var kind, queue string
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT kind, queue FROM river_job WHERE args->>'event_id' = 'p-1'`).Scan(&kind, &queue); err != nil {
		t.Fatal(err)
	}
	if kind != "payment_captured" || queue != "payments" {
		t.Fatalf("job kind %q queue %q", kind, queue)
	}
	if code := terminate(t, d, 30*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}
}
