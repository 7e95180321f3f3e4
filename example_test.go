package inboxd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/worker"
)

// A service runs the inbox engine in its own process, with Go handlers:
// New checks the configuration, Run runs the engine until its context
// ends or Stop is called, and Stop lets the running handlers finish
// (StopAndCancel cancels them). Here the row comes from the service's own
// SQL; a source (Config.Ingest, AMQP, NATS, Webhook) would store it the
// same way. A service's main ends Run's context on the first SIGINT or
// SIGTERM (signal.NotifyContext), serves metrics on /metrics
// (promhttp.HandlerFor) and answers probes with Ready and Healthy.
//
// The database is migrated to inboxd's schema (`inboxd migrate`); here
// DATABASE_URL names a database of the Example's own.
func Example() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // the engine's own statements
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	handled := make(chan struct{})
	reg := handlers.NewRegistry()
	err = reg.HandleFunc("email.requested", func(ctx context.Context, ev *handlers.Event) error {
		if len(ev.Payload) == 0 {
			return handlers.Permanent(errors.New("empty e-mail request")) // dead at once
		}
		// Send, passing handlers.IdempotencyKeyFor(ev) as the provider's
		// idempotency key: at-least-once, so the provider deduplicates.
		fmt.Printf("send %s (key %s): %s\n", ev.EventType, handlers.IdempotencyKeyFor(ev), ev.Payload)
		close(handled)
		return nil
	}, handlers.Concurrency(8), handlers.Timeout(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}

	ib, err := inboxd.New(inboxd.Config{
		Registry:   reg,
		DB:         db,
		Logger:     zerolog.Nop(), // zerolog.New(os.Stderr) in a service
		Registerer: prometheus.NewRegistry(),
		Worker:     worker.Config{Workers: 16, ShutdownTimeout: time.Minute},
		// TxDB nil: Run opens the transactional handlers' pool itself.
		// Retention left zero: the defaults. No source: rows come from
		// the service's own transactions.
	})
	if err != nil {
		fmt.Println(err) // every bad setting, one per line
		return
	}
	ran := make(chan error, 1)
	go func() { ran <- ib.Run(ctx) }()

	_, err = db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload)
		VALUES ('signup', 'u-42', 'email.requested', '{"to": "ann@example.com"}')`)
	if err != nil {
		fmt.Println(err)
		return
	}
	select {
	case <-handled:
	case err := <-ran:
		fmt.Println("run:", err) // a part failed, or the schema is not there
		return
	}

	// Stopping: give the running handlers ten seconds, then cancel them.
	graceful, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ib.Stop(graceful); err != nil {
		hard, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := ib.StopAndCancel(hard); err != nil {
			fmt.Println("inboxd did not stop:", err)
		}
	}
	fmt.Println("run:", <-ran)

	var status string
	if err := db.QueryRow(ctx, `SELECT status FROM inbox WHERE source = 'signup' AND event_id = 'u-42'`).Scan(&status); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("row:", status)
	// Output:
	// send email.requested (key signup/u-42): {"to": "ann@example.com"}
	// run: <nil>
	// row: processed
}

// Emit writes messages to the outbox in the caller's transaction: they are
// published (by a process running with Config.Outbox) once it commits, and
// never if it rolls back.
func ExampleEmit() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	for _, commit := range []bool{false, true} {
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			// … the service's own writes, in tx …
			ids, err := inboxd.Emit(ctx, tx, inboxd.OutboxMessage{
				Destination: "kafka:shipments",
				EventType:   "order.shipped",
				EventID:     fmt.Sprintf("ship-7-%v", commit),
				Key:         "order-7", // the order's messages in the order written
				Payload:     []byte(`{"order": 7}`),
			})
			fmt.Println("emitted", ids)
			if !commit {
				return errors.New("rolled back")
			}
			return err
		})
		fmt.Println("transaction:", err)
	}
	// A message the relay could not publish is refused, and nothing written.
	_, err = inboxd.Emit(ctx, nil, inboxd.OutboxMessage{Destination: "kafka:shipments"})
	fmt.Println(err)

	rows, err := db.Query(ctx, `SELECT event_id, destination, key, status FROM outbox ORDER BY id`)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, dest, key, status string
		if err := rows.Scan(&id, &dest, &key, &status); err != nil {
			fmt.Println(err)
		}
		fmt.Println("outbox:", id, dest, key, status)
	}
	if err := rows.Err(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// emitted [ship-7-false]
	// transaction: rolled back
	// emitted [ship-7-true]
	// transaction: <nil>
	// inboxd: Emit needs the caller's transaction
	// outbox: ship-7-true kafka:shipments order-7 pending
}

// A transactional handler (Registry.HandleTx) runs in the transaction that
// marks the row processed: the service's writes, and the events it emits
// with Emit, commit together with the row, or not at all. A failed attempt
// rolls them back and the row is retried.
func Example_transactionalHandler() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, paid bool NOT NULL DEFAULT false);
		INSERT INTO orders (id) VALUES ('o-7')`); err != nil {
		fmt.Println(err)
		return
	}

	handled := make(chan struct{}, 2)
	attempts := 0
	reg := handlers.NewRegistry()
	err = reg.HandleTx("payment.captured", handlers.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
		defer func() { handled <- struct{}{} }()
		attempts++
		if _, err := tx.Exec(ctx, `UPDATE orders SET paid = true WHERE id = $1`, string(ev.Key)); err != nil {
			return err
		}
		if _, err := inboxd.Emit(ctx, tx, inboxd.OutboxMessage{Destination: "kafka:orders", EventType: "order.paid",
			EventID: "paid-" + string(ev.Key), Key: string(ev.Key), Payload: ev.Payload}); err != nil {
			return err
		}
		if attempts == 1 {
			// Everything above is rolled back; the row is retried.
			return handlers.RetryAfter(10*time.Millisecond, errors.New("ledger busy"))
		}
		return nil
	}), handlers.Ordered(handlers.OnDeadBlock)) // one row of an order at a time, in order
	if err != nil {
		fmt.Println(err)
		return
	}
	ib, err := inboxd.New(inboxd.Config{Registry: reg, DB: db, TxDB: db, Logger: zerolog.Nop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- ib.Run(runCtx) }()
	if _, err := db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, key, payload)
		VALUES ('payments', 'pay-1', 'payment.captured', 'o-7', '{"amount": 1200}')`); err != nil {
		fmt.Println(err)
		return
	}
	<-handled
	<-handled
	stop() // as Stop does: the running handlers finish first
	fmt.Println("run:", <-ran)

	var paid bool
	var status, lastError string
	var outbox int
	_ = db.QueryRow(ctx, `SELECT paid FROM orders WHERE id = 'o-7'`).Scan(&paid)
	_ = db.QueryRow(ctx, `SELECT status, coalesce(last_error, '') FROM inbox WHERE event_id = 'pay-1'`).Scan(&status, &lastError)
	_ = db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE event_id = 'paid-o-7'`).Scan(&outbox)
	fmt.Println("attempts:", attempts, "row:", status)
	fmt.Println("order paid:", paid, "order.paid in the outbox:", outbox)
	// Output:
	// run: <nil>
	// attempts: 2 row: processed
	// order paid: true order.paid in the outbox: 1
}
