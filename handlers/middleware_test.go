package handlers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/opfiles/routesfile"
)

// Middleware runs in the order it was added, the first outermost, around
// every handler of the registry, added before or after it.
func TestMiddlewareOrder(t *testing.T) {
	t.Parallel()
	var trail []string
	mw := func(name string) handlers.Middleware {
		return func(next handlers.Handler) handlers.Handler {
			return handlers.HandlerFunc(func(ctx context.Context, ev *handlers.Event) error {
				trail = append(trail, name+" in")
				err := next.Handle(ctx, ev)
				trail = append(trail, name+" out")
				return err
			})
		}
	}
	reg := handlers.NewRegistry()
	if err := reg.HandleFunc("before", func(context.Context, *handlers.Event) error {
		trail = append(trail, "handler")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	reg.Use(mw("a"), mw("b"))
	reg.Use(mw("c"))
	if err := reg.HandleFunc("after", func(context.Context, *handlers.Event) error {
		trail = append(trail, "handler")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := "a in, b in, c in, handler, c out, b out, a out"
	for _, typ := range []string{"before", "after"} {
		trail = nil
		if err := reg.Lookup(typ).Handler.Handle(context.Background(), &handlers.Event{EventType: typ}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(trail, ", "); got != want {
			t.Errorf("%s: %s, want %s", typ, got, want)
		}
	}
	// The default route gets the middleware too.
	trail = nil
	_ = reg.Lookup("unrouted").Handler.Handle(context.Background(), &handlers.Event{EventType: "unrouted"})
	if got := strings.Join(trail, ", "); got != "a in, b in, c in, c out, b out, a out" {
		t.Errorf("default route: %s", got)
	}
}

// A transactional handler runs through the same chain, its transaction
// taken from the context; without one it fails permanently instead of
// running outside a transaction.
func TestTxHandlerThroughTheChain(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	var gotTx pgx.Tx
	if err := reg.HandleTx("tx", handlers.TxHandlerFunc(func(_ context.Context, tx pgx.Tx, _ *handlers.Event) error {
		gotTx = tx
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	route := reg.Lookup("tx")
	if !route.Tx {
		t.Fatal("route not marked transactional")
	}
	err := route.Handler.Handle(context.Background(), &handlers.Event{})
	if !handlers.IsPermanent(err) {
		t.Fatalf("without a transaction: %v, want a permanent error", err)
	}
	var tx pgx.Tx = fakeTx{}
	if err := route.Handler.Handle(handlers.ContextWithTx(context.Background(), tx), &handlers.Event{}); err != nil || gotTx != tx {
		t.Fatalf("with a transaction: err %v, tx %v", err, gotTx)
	}
}

// fakeTx stands for a transaction in tests that never use it.
type fakeTx struct{ pgx.Tx }

// Route policies come from Go options and from the routes file alike.
func TestRoutePolicies(t *testing.T) {
	t.Parallel()
	reg := handlers.NewRegistry()
	if err := reg.HandleFunc("go.route", func(context.Context, *handlers.Event) error { return nil },
		handlers.Concurrency(3), handlers.MaxAttempts(4), handlers.Backoff(time.Second, time.Minute),
		handlers.Timeout(5*time.Second), handlers.Ordered(handlers.OnDeadSkip)); err != nil {
		t.Fatal(err)
	}
	want := handlers.Policy{Concurrency: 3, MaxAttempts: 4, BackoffBase: time.Second, BackoffMax: time.Minute,
		Timeout: 5 * time.Second, Ordered: true, OnDead: handlers.OnDeadSkip}
	if got := reg.Lookup("go.route").Policy; got != want {
		t.Errorf("Go policy = %+v, want %+v", got, want)
	}
	err := reg.HandleFunc("bad", func(context.Context, *handlers.Event) error { return nil }, handlers.Concurrency(-1))
	if err == nil || !strings.Contains(err.Error(), "concurrency") {
		t.Errorf("negative concurrency: %v", err)
	}

	routes, err := routesfile.Parse([]byte(`
routes:
  - type: file.route
    handler: ignore
    concurrency: 2
    max_attempts: 7
    backoff_base: 100ms
    backoff_max: 2s
    timeout: 1s
    ordered: true
    on_dead: block
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := routes.Register(reg, handlers.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	want = handlers.Policy{Concurrency: 2, MaxAttempts: 7, BackoffBase: 100 * time.Millisecond, BackoffMax: 2 * time.Second,
		Timeout: time.Second, Ordered: true, OnDead: handlers.OnDeadBlock}
	if got := reg.Lookup("file.route").Policy; got != want {
		t.Errorf("file policy = %+v, want %+v", got, want)
	}
	if got := len(reg.Routes()); got != 2 {
		t.Errorf("Routes() has %d routes, want 2", got)
	}
}

// A river route needs a job inserter; with one it is transactional and
// enqueues the route's job for the event in the row's transaction.
func TestRiverRoute(t *testing.T) {
	t.Parallel()
	routes, err := routesfile.Parse([]byte(`
routes:
  - type: payment.captured
    handler: river
    kind: payment_captured
    queue: payments
    priority: 2
    max_attempts: 9
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := routes.Register(handlers.NewRegistry(), handlers.RegisterOptions{}); err == nil ||
		!strings.Contains(err.Error(), "River") {
		t.Fatalf("river route without an inserter: %v", err)
	}
	ins := &recordingInserter{}
	reg, err := handlers.NewRegistryFromRoutes(routes, handlers.RegisterOptions{Jobs: ins})
	if err != nil {
		t.Fatal(err)
	}
	route := reg.Lookup("payment.captured")
	if !route.Tx || route.Policy.MaxAttempts != 0 {
		t.Fatalf("route = %+v: want transactional, max_attempts left to the job", route)
	}
	ev := &handlers.Event{EventID: "p-1", EventType: "payment.captured"}
	if err := route.Handler.Handle(handlers.ContextWithTx(context.Background(), fakeTx{}), ev); err != nil {
		t.Fatal(err)
	}
	want := handlers.Job{Kind: "payment_captured", Queue: "payments", Priority: 2, MaxAttempts: 9}
	if len(ins.jobs) != 1 || ins.jobs[0] != want || ins.events[0] != ev {
		t.Fatalf("inserted %+v, want %+v for the event", ins.jobs, want)
	}
}

type recordingInserter struct {
	jobs   []handlers.Job
	events []*handlers.Event
}

func (r *recordingInserter) InsertJob(_ context.Context, _ pgx.Tx, job handlers.Job, ev *handlers.Event) error {
	r.jobs = append(r.jobs, job)
	r.events = append(r.events, ev)
	return nil
}
