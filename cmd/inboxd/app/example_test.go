package app_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/cmd/inboxd/app"
	"github.com/inboxd/inboxd/handlers"
)

// A service runs the inboxd daemon from its own main with Go handlers
// beside the routes file's.
func ExampleMain() {
	reg := handlers.NewRegistry()
	err := reg.HandleFunc("email.requested", func(ctx context.Context, ev *handlers.Event) error {
		if len(ev.Payload) == 0 {
			return handlers.Permanent(errors.New("empty e-mail request")) // dead at once
		}
		// Send, passing handlers.IdempotencyKeyFor(ev) as the provider's
		// idempotency key: at-least-once, so the provider deduplicates.
		return nil
	})
	if err == nil {
		err = reg.HandleTx("payment.captured", handlers.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
			// Commits together with the row's move to processed.
			_, err := tx.Exec(ctx, `UPDATE orders SET paid = true WHERE payment_event = $1`, ev.EventID)
			return err
		}))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(app.ExitUsage)
	}

	// SIGINT/SIGTERM stop gracefully (a second one exits at once); SIGHUP
	// reloads the routes file.
	ctx, stop := app.SignalContext(context.Background(), os.Stderr)
	code := app.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, app.Options{Registry: reg})
	stop()
	os.Exit(code)
}
