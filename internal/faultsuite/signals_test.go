package faultsuite

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// insertN inserts n rows of type typ with ids prefix-i under source "sql"
// and returns the ids.
func insertN(t *testing.T, run *Run, prefix, typ string, n int) []string {
	t.Helper()
	var evs []Event
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%05d", prefix, i)
		ids = append(ids, id)
		evs = append(evs, Event{ID: id, Type: typ})
	}
	if err := InsertEvents(context.Background(), run.DB, "sql", evs); err != nil {
		t.Fatal(err)
	}
	run.Expect("sql", ids...)
	return ids
}

// Scenario d: SIGTERM while PostgreSQL is down (stopped with -m immediate)
// and 32 handlers are in flight. With INBOXD_SHUTDOWN_TIMEOUT=5s the
// process must exit within 5s + 5s; a second SIGTERM must end it at once.
// Nothing is lost: once PostgreSQL is back, a new daemon processes every
// row.
func TestSIGTERMWhilePostgresDown(t *testing.T) {
	scenario(t, light)
	cluster := NewCluster(t)
	url := clusterDB(t, cluster)
	inspect := OpenPool(t, url)
	sink := NewSink(t)
	lease := 5 * time.Second
	run := NewRun(t, inspect, sink, lease)
	const workers = 32
	const shutdownTimeout = 5 * time.Second
	routes := writeRoutes(t, httpRoute(sink, "slow.http"))
	env := baseEnv(url, lease, workers, "INBOXD_ROUTES="+routes, "INBOXD_SHUTDOWN_TIMEOUT="+shutdownTimeout.String())

	// inFlightThenDown starts a daemon, fills its 32 workers with held
	// requests and stops PostgreSQL under them.
	inFlightThenDown := func(name, prefix string) *Daemon {
		sink.Hold()
		d := StartDaemon(t, DaemonSpec{Name: name, Binary: bins.Inboxd, Env: env})
		insertN(t, run, prefix, "slow.http", 2*workers)
		WaitFor(t, 30*time.Second, fmt.Sprintf("%d requests held at the sink", workers), func() bool { return sink.Held() >= workers })
		run.Ledger.Record("pg-stop-immediate+SIGTERM", Fault{InFlight: workers})
		if err := cluster.Stop(StopImmediate); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// backUp restarts PostgreSQL and the sink.
	backUp := func() {
		if err := cluster.Start(); err != nil {
			t.Fatal(err)
		}
		sink.Release()
	}

	// One SIGTERM: bounded exit.
	d1 := inFlightThenDown("a", "first")
	budget := shutdownTimeout + 5*time.Second
	measure := budget + 20*time.Second // a late exit is waited for this long, to report how late
	exited, took, code := d1.Terminate(measure)
	switch {
	case !exited:
		// Where is it stuck? The goroutine dump goes to its log, printed below.
		d1.DumpGoroutines()
		t.Errorf("SHUTDOWN: still running %s after SIGTERM with PostgreSQL down (budget INBOXD_SHUTDOWN_TIMEOUT + 5s = %s); sent SIGQUIT, goroutine dump at the end of daemon a's log", measure, budget)
	case took > budget:
		t.Errorf("SHUTDOWN: exited %s after SIGTERM with PostgreSQL down, want within INBOXD_SHUTDOWN_TIMEOUT + 5s = %s (exit code %d)",
			took.Round(time.Millisecond), budget, code)
	}
	run.Note("sigterm_exit=%s/code=%d/exited=%v", took.Round(time.Millisecond), code, exited)
	backUp()

	// Two SIGTERMs: the second ends the process at once.
	d2 := inFlightThenDown("b", "second")
	d2.Signal(syscall.SIGTERM)
	if exited, _ := d2.WaitExit(time.Second); exited {
		run.Note("second_sigterm=not-needed")
	} else {
		d2.Signal(syscall.SIGTERM)
		secondAt := time.Now()
		const atOnce = time.Second
		if exited, _ := d2.WaitExit(atOnce); !exited {
			d2.DumpGoroutines()
			t.Errorf("SECOND SIGTERM: the process did not exit within %s of a second SIGTERM; sent SIGQUIT, goroutine dump at the end of daemon b's log", atOnce)
		}
		run.Note("second_sigterm_exit=%s/code=%d", time.Since(secondAt).Round(10*time.Millisecond), d2.ExitCode())
	}
	backUp()

	// Nothing lost: a new daemon processes every row once the leases of
	// the dead ones expire.
	recovered := time.Now()
	StartDaemon(t, DaemonSpec{Name: "c", Binary: bins.Inboxd, Env: env})
	CheckLeasesRecovered(t, inspect, recovered, lease)
	run.WaitProcessed(60 * time.Second)
	run.Check()
}

// Scenario d: SIGHUP (the signal that will reload the routes) must not kill
// the daemon, and must leave no row processing.
func TestSIGHUPKeepsDaemonRunning(t *testing.T) {
	scenario(t, light)
	db := sharedDB(t)
	sink := NewSink(t)
	sink.SetDelay(20 * time.Millisecond)
	lease := 2 * time.Second
	run := NewRun(t, db.Pool, sink, lease)
	const workers = 8
	routes := writeRoutes(t, httpRoute(sink, "http.effect"))
	env := baseEnv(db.URL, lease, workers, "INBOXD_ROUTES="+routes)
	d := StartDaemon(t, DaemonSpec{Name: "a", Binary: bins.Inboxd, Env: env})

	n := pick(400, 4000)
	insertN(t, run, "hup", "http.effect", n)
	WaitFor(t, 30*time.Second, "processing under way", func() bool {
		var c int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE status = 'processed'`).Scan(&c)
		return c >= n/8
	})
	d.Signal(syscall.SIGHUP)
	hupAt := time.Now()
	run.Ledger.Record("SIGHUP", Fault{})
	// Still alive and ready a moment later (a process killed by the signal
	// is gone within milliseconds).
	time.Sleep(500 * time.Millisecond)
	if !d.Running() {
		var processing int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE status = 'processing'`).Scan(&processing)
		t.Errorf("SIGHUP KILLED THE DAEMON: %s, leaving %d rows processing", d.ExitDescription(), processing)
		run.Note("sighup=%q left_processing=%d", d.ExitDescription(), processing)
		// Finish the history with a replacement, to check the rest.
		StartDaemon(t, DaemonSpec{Name: "replacement", Binary: bins.Inboxd, Env: env})
	} else {
		d.WaitReady(10 * time.Second)
		run.Note("sighup=survived")
	}
	CheckLeasesRecovered(t, db.Pool, hupAt, lease)
	run.WaitProcessed(60 * time.Second)
	var processing int
	_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE status = 'processing'`).Scan(&processing)
	if processing > 0 {
		t.Errorf("%d rows still processing after every row settled", processing)
	}
	run.Check()
}
