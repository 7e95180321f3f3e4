package inboxd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/worker"
)

// A service runs the inbox engine in its own process, with Go handlers,
// until SIGINT or SIGTERM. Its main would be:
//
//	func main() {
//		if err := runService(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//	}
//
// so that every deferred call of runService runs before the exit.
func Example() {
	if err := runService(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

func runService() error {
	reg := handlers.NewRegistry()
	err := reg.HandleFunc("email.requested", func(ctx context.Context, ev *handlers.Event) error {
		if len(ev.Payload) == 0 {
			return handlers.Permanent(errors.New("empty e-mail request")) // dead at once
		}
		// Send, passing handlers.IdempotencyKeyFor(ev) as the provider's
		// idempotency key: at-least-once, so the provider deduplicates.
		return nil
	}, handlers.Concurrency(8), handlers.Timeout(30*time.Second))
	if err == nil {
		err = reg.HandleTx("payment.captured", handlers.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *handlers.Event) error {
			// Commits together with the row's move to processed.
			_, err := tx.Exec(ctx, `UPDATE orders SET paid = true WHERE payment_event = $1`, ev.EventID)
			return err
		}), handlers.Ordered(handlers.OnDeadBlock))
	}
	if err != nil {
		return err
	}

	// The first SIGINT or SIGTERM ends ctx: Run stops claiming and lets
	// the running handlers finish.
	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()

	// One pool for the engine's own statements, one for the transactions
	// of transactional handlers (pools connect lazily).
	db, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer db.Close()
	txdb, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer txdb.Close()

	metrics := prometheus.NewRegistry() // serve it on /metrics with promhttp.HandlerFor
	ib, err := inboxd.New(inboxd.Config{
		Registry:   reg,
		DB:         db,
		TxDB:       txdb,
		Logger:     zerolog.New(os.Stderr).With().Timestamp().Logger(),
		Registerer: metrics,
		Worker:     worker.Config{Workers: 16, ShutdownTimeout: time.Minute},
		// Retention and Ingest left zero: the defaults, and no Kafka (rows
		// are inserted by the service's own transactions).
	})
	if err != nil {
		return err // every bad setting, one per line
	}
	// A readiness probe answers ib.Ready(r.Context()), a liveness probe
	// ib.Healthy().

	ran := make(chan error, 1)
	go func() { ran <- ib.Run(ctx) }()
	select {
	case err := <-ran:
		return err // a part failed, or the schema is not there (inboxd migrate)
	case <-ctx.Done():
	}
	// Stopping: give the running handlers ten seconds, then cancel them.
	graceful, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ib.Stop(graceful); err != nil {
		hard, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ib.StopAndCancel(hard); err != nil {
			return fmt.Errorf("inboxd did not stop: %w", err)
		}
	}
	return <-ran
}
