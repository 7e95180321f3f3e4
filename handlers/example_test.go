package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/handlers"
)

// Register a plain handler for one event type. The worker looks the
// handler up by the row's event_type and calls it; here the lookup and call
// are made by hand.
func ExampleRegistry_HandleFunc() {
	reg := handlers.NewRegistry()
	err := reg.HandleFunc("order.created", func(ctx context.Context, ev *handlers.Event) error {
		fmt.Printf("order %s created (attempt %d): %s\n", ev.EventID, ev.Attempt, ev.Payload)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	ev := &handlers.Event{EventID: "evt-1", EventType: "order.created", Payload: []byte(`{"sku":"A-1"}`), Attempt: 1}
	if err := reg.Lookup(ev.EventType).Handler.Handle(context.Background(), ev); err != nil {
		log.Fatal(err)
	}

	// Types without a handler go to the default, which dead-letters them.
	err = reg.Lookup("order.unknown").Handler.Handle(context.Background(), &handlers.Event{EventType: "order.unknown"})
	fmt.Println(handlers.IsPermanent(err), err)
	// Output:
	// order evt-1 created (attempt 1): {"sku":"A-1"}
	// true no handler for event type "order.unknown"
}

// Register a transactional handler: its writes through tx commit together
// with the row's move to processed, so the effect happens exactly once.
// Deduplicating on the event id in the handler's own table is then not
// needed, but harmless.
func ExampleRegistry_HandleTx() {
	reg := handlers.NewRegistry()
	err := reg.HandleTx("order.paid", handlers.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
		var p struct {
			OrderID string `json:"order_id"`
			Amount  int64  `json:"amount"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			// Retrying cannot fix a malformed payload.
			return handlers.Permanent(fmt.Errorf("decode payload: %w", err))
		}
		_, err := tx.Exec(ctx,
			`UPDATE orders SET paid_amount = paid_amount + $2 WHERE id = $1`,
			p.OrderID, p.Amount)
		return err // a database error is retried
	}))
	if err != nil {
		log.Fatal(err)
	}
	// Hand reg to the worker pool (see package worker) to run it.
}

// Steer retries from a handler's error: Permanent sends the row to dead at
// once, RetryAfter asks for a specific delay, any other error retries with
// backoff.
func ExamplePermanent() {
	charge := func(ctx context.Context, ev *handlers.Event) error {
		switch string(ev.Payload) {
		case "card declined":
			return handlers.Permanent(errors.New("card declined"))
		case "rate limited":
			return handlers.RetryAfter(30*time.Second, errors.New("payment provider rate limit"))
		case "network down":
			return errors.New("dial payment provider: connection refused")
		}
		return nil
	}

	for _, payload := range []string{"ok", "card declined", "rate limited", "network down"} {
		err := charge(context.Background(), &handlers.Event{Payload: []byte(payload)})
		delay, hasDelay := handlers.RetryDelay(err)
		switch {
		case err == nil:
			fmt.Printf("%s: processed\n", payload)
		case handlers.IsPermanent(err):
			fmt.Printf("%s: dead: %v\n", payload, err)
		case hasDelay:
			fmt.Printf("%s: retry in %s: %v\n", payload, delay, err)
		default:
			fmt.Printf("%s: retry with backoff: %v\n", payload, err)
		}
	}
	// Output:
	// ok: processed
	// card declined: dead: card declined
	// rate limited: retry in 30s: payment provider rate limit
	// network down: retry with backoff: dial payment provider: connection refused
}

// Build a registry from routes to the built-in handlers, as the daemon does
// from its routes file (INBOXD_ROUTES). Handlers registered in Go can sit
// beside them; a bad route is refused, naming its field.
func ExampleNewRegistryFromRoutes() {
	routes := &handlers.Routes{
		Routes: []handlers.RouteConfig{
			{Type: "order.created", Handler: handlers.HandlerHTTP, URL: "http://orders.internal/hooks/inbox", Timeout: 10 * time.Second},
			{Type: "order.audited", Handler: handlers.HandlerIgnore},
		},
		Default: handlers.HandlerDead,
	}
	reg, err := handlers.NewRegistryFromRoutes(routes, handlers.RegisterOptions{MaxRetryAfter: 5 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	if err := reg.HandleFunc("order.shipped", func(context.Context, *handlers.Event) error { return nil }); err != nil {
		log.Fatal(err)
	}
	fmt.Println(reg.Types(), "event types routed")

	bad := &handlers.Routes{Routes: []handlers.RouteConfig{
		{Type: "order.created", Handler: handlers.HandlerHTTP, URL: "orders.internal/hooks/inbox"},
	}}
	_, err = handlers.NewRegistryFromRoutes(bad, handlers.RegisterOptions{})
	fmt.Println(err)
	// Output:
	// 3 event types routed
	// routes: route 1 (type "order.created"): url: must be an absolute http or https URL
}

// The http handler POSTs the payload with "<source>/<event id>" as the
// idempotency key (unique per inbox row), and turns the response status into
// the row's outcome.
func ExampleNewHTTP() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("%s %s key=%s type=%s attempt=%s body=%s\n", r.Method, r.URL.Path,
			r.Header.Get("Idempotency-Key"), r.Header.Get("Inbox-Event-Type"), r.Header.Get("Inbox-Attempt"), body)
		if r.Header.Get("Inbox-Event-Type") == "order.bogus" {
			http.Error(w, `{"error":"bad sku"}`, http.StatusUnprocessableEntity)
		}
	}))
	defer srv.Close()

	h, err := handlers.NewHTTP(handlers.HTTPConfig{URL: srv.URL + "/hooks/inbox", Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	err = h.Handle(context.Background(), &handlers.Event{
		Source: "orders", EventID: "evt-1", EventType: "order.created", Payload: []byte(`{"sku":"A-1"}`), Attempt: 1,
	})
	fmt.Println("error:", err)
	err = h.Handle(context.Background(), &handlers.Event{
		Source: "orders", EventID: "evt-2", EventType: "order.bogus", Payload: []byte(`{"sku":"?"}`), Attempt: 1,
	})
	fmt.Println("permanent:", handlers.IsPermanent(err), "error:", err)
	// Output:
	// POST /hooks/inbox key=orders/evt-1 type=order.created attempt=1 body={"sku":"A-1"}
	// error: <nil>
	// POST /hooks/inbox key=orders/evt-2 type=order.bogus attempt=1 body={"sku":"?"}
	// permanent: true error: http 422 Unprocessable Entity: {"error":"bad sku"}
}
