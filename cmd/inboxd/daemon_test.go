package main

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// A row inserted with plain SQL reaches the HTTP sink with its event id as
// Idempotency-Key and ends processed, even when the daemon is killed with
// SIGKILL in the middle of delivering it and started again.
func TestPlainInsertDeliveredAcrossSIGKILL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := newSink(t)
	arrived := make(chan struct{})
	unblock := make(chan struct{})
	var first atomic.Bool
	s.SetHook(func(w http.ResponseWriter, r *http.Request, req testkit.Delivery) bool {
		if req.IdempotencyKey == "shop/order-1" && first.CompareAndSwap(false, true) {
			close(arrived)
			select { // hold the first delivery until the daemon is dead
			case <-unblock:
			case <-r.Context().Done():
			}
			return true
		}
		return false
	})
	t.Cleanup(func() {
		select {
		case <-unblock:
		default:
			close(unblock)
		}
	})
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: http\n    url: "+s.URL+"/hook\n    timeout: 30s\n")
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_ROUTES=" + routes, "INBOXD_LEASE=2s", "INBOXD_BACKOFF_BASE=50ms"}

	d := startDaemon(t, env...)
	payload := []byte("{\"order\":1,\"bin\":\"\x00\xff\"}")
	if _, err := db.Pool.Exec(context.Background(),
		`INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('shop', 'order-1', 'order.created', $1)`, payload); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the row never reached the sink")
	}
	d.Kill()
	close(unblock)
	if status, _ := rowStatus(t, db, "order-1"); status != "processing" {
		t.Fatalf("after SIGKILL the row is %s, want processing (held by the dead daemon)", status)
	}
	// Inserted while no daemon runs.
	if _, err := db.Pool.Exec(context.Background(),
		`INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('shop', 'order-2', 'order.created', '{}')`); err != nil {
		t.Fatal(err)
	}

	d2 := startDaemon(t, env...)
	waitFor(t, 20*time.Second, "both rows processed", func() bool { return countStatus(t, db, "processed") == 2 })

	reqs := s.ByKey("shop/order-1")
	if len(reqs) < 2 {
		t.Fatalf("order-1 delivered %d times, want the killed attempt and the rescued one", len(reqs))
	}
	last := reqs[len(reqs)-1]
	if last.Attempt != 2 || last.EventType != "order.created" || last.Source != "shop" || !bytes.Equal(last.Body, payload) {
		t.Fatalf("redelivery = %+v", last)
	}
	if _, attempts := rowStatus(t, db, "order-1"); attempts != 2 {
		t.Fatalf("order-1 attempts = %d, want 2", attempts)
	}
	if got := s.ByKey("shop/order-2"); len(got) != 1 {
		t.Fatalf("order-2 delivered %d times, want 1", len(got))
	}
	if code := terminate(t, d2, 30*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}
}

// SIGTERM with a delivery still in flight past the shutdown budget: the
// daemon exits 0 and leaves no row in processing; the row goes back to
// received unattempted and is delivered by the next daemon.
func TestSIGTERMReleasesInFlightRows(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := newSink(t)
	arrived := make(chan struct{}, 10)
	var hold atomic.Bool
	hold.Store(true)
	s.SetHook(func(w http.ResponseWriter, r *http.Request, req testkit.Delivery) bool {
		if !hold.Load() {
			return false
		}
		arrived <- struct{}{}
		<-r.Context().Done() // the daemon cancels the request at shutdown
		return true
	})
	routes := writeRoutes(t, "routes:\n  - type: slow\n    handler: http\n    url: "+s.URL+"\n    timeout: 1m\n")
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_ROUTES=" + routes, "INBOXD_SHUTDOWN_TIMEOUT=300ms"}
	d := startDaemon(t, env...)
	if _, err := db.Pool.Exec(context.Background(),
		`INSERT INTO inbox (source, event_id, event_type, payload) VALUES ('s', 'slow-1', 'slow', '{}')`); err != nil {
		t.Fatal(err)
	}
	<-arrived
	if code := terminate(t, d, 30*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}
	if n := countStatus(t, db, "processing"); n != 0 {
		t.Fatalf("%d rows left in processing", n)
	}
	if status, attempts := rowStatus(t, db, "slow-1"); status != "received" || attempts != 0 {
		t.Fatalf("row = %s after %d attempts, want received with the attempt not counted", status, attempts)
	}
	hold.Store(false)
	startDaemon(t, env...)
	waitFor(t, 10*time.Second, "row processed by the next daemon", func() bool {
		status, _ := rowStatus(t, db, "slow-1")
		return status == "processed"
	})
}
