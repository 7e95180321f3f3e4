package engine

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// TestUnreachableTargetCostsNoAttempt: an http route whose target refuses
// connections (down for longer than the row's attempts last) leaves its
// rows received, retried with backoff, their attempts not counted; once
// the target answers, they are processed. Before, each refused connection
// used an attempt and the rows went dead (the reported case: EMFILE while
// the daemon's own server held every file descriptor).
func TestUnreachableTargetCostsNoAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// A port that refuses connections until the target comes up on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	h, err := handlers.NewHTTP(handlers.HTTPConfig{URL: "http://" + addr + "/hook", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int64
	counted := handlers.HandlerFunc(func(ctx context.Context, ev *handlers.Event) error {
		err := h.Handle(ctx, ev)
		if handlers.IsNotSent(err) {
			dials.Add(1)
		}
		return err
	})
	if err := b.reg.Handle("x", counted); err != nil {
		t.Fatal(err)
	}
	all := ids("e", 3)
	b.insert(t, "x", all...)
	cfg := testConfig()
	cfg.MaxAttempts = 2
	b.start(t, cfg)

	// Many more refused attempts than the rows' attempts allow.
	waitFor(t, 20*time.Second, "ten refused deliveries per row", func() bool { return dials.Load() >= int64(10*len(all)) })
	for _, id := range all {
		r := b.row(t, id)
		if r.Status == "dead" || r.Attempts > 1 {
			t.Fatalf("row %s = %s with %d attempts after %d refused deliveries: a delivery never sent was counted",
				id, r.Status, r.Attempts, dials.Load())
		}
		if r.LastError == nil || !strings.Contains(*r.LastError, "not sent") {
			t.Errorf("row %s last_error = %v, want it to say the event was not sent", id, errString(r.LastError))
		}
	}

	// The target comes up: every row is processed.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	waitFor(t, 20*time.Second, "every row processed once the target answers", func() bool {
		return b.countStatus(t, "processed") == len(all)
	})
}
