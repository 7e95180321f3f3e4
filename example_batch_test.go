package inboxd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// Batch handlers take a route's rows many at a time. A plain batch
// handler (HandleBatch) makes one call per batch, at-least-once; a
// transactional one (HandleTxBatch) runs in the transaction that writes
// every row's outcome, so its writes commit exactly when its rows are
// processed. Each row may have its own outcome (handlers.RowErrors); any
// other error retries the whole batch.
func Example_batchHandlers() {
	ctx := context.Background()
	dbURL, drop := exampleDatabase() // a database of its own
	defer drop()
	db, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE TABLE prices (sku text PRIMARY KEY, cents int NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	reg := handlers.NewRegistry()
	err = reg.HandleBatch("document.changed", handlers.BatchHandlerFunc(func(ctx context.Context, evs []*handlers.Event) error {
		errs := make(handlers.RowErrors, len(evs))
		failed := false
		for i, ev := range evs {
			if len(ev.Payload) == 0 {
				errs[i], failed = handlers.Permanent(errors.New("empty document")), true // dead at once
			}
		}
		// Index the other documents with one bulk request, each under
		// handlers.IdempotencyKeyFor(ev): a retried batch overwrites, never
		// duplicates.
		if failed {
			return errs
		}
		return nil
	}), handlers.Batching(100, 1<<20, 20*time.Millisecond)) // 100 rows, 1 MiB, 20ms for a fuller batch
	if err == nil {
		err = reg.HandleTxBatch("price.changed", handlers.TxBatchHandlerFunc(func(ctx context.Context, tx pgx.Tx, evs []*handlers.Event) error {
			skus := make([]string, len(evs))
			prices := make([]string, len(evs))
			for i, ev := range evs {
				skus[i], prices[i] = string(ev.Key), string(ev.Payload)
			}
			// One statement for the whole batch, committed with the rows'
			// outcomes.
			_, err := tx.Exec(ctx, `INSERT INTO prices (sku, cents)
				SELECT sku, cents::int FROM unnest($1::text[], $2::text[]) AS p(sku, cents)
				ON CONFLICT (sku) DO UPDATE SET cents = excluded.cents`, skus, prices)
			return err
		}), handlers.Batching(100, 0, 0), handlers.Ordered(handlers.OnDeadBlock)) // one row per key in a batch
	}
	if err != nil {
		log.Fatal(err)
	}

	ib, err := inboxd.New(inboxd.Config{Registry: reg, DB: db, Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- ib.Run(runCtx) }()
	<-ib.Running()

	// Any service may insert rows; here plain SQL does.
	if _, err := db.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, key, payload) VALUES
		('docs', 'd-1', 'document.changed', NULL, 'hello'), ('docs', 'd-2', 'document.changed', NULL, ''),
		('shop', 'p-1', 'price.changed', 'sku-1', '100'), ('shop', 'p-2', 'price.changed', 'sku-2', '250'),
		('shop', 'p-3', 'price.changed', 'sku-1', '120')`); err != nil {
		log.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var left int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE status IN ('received', 'processing')`).Scan(&left); err != nil {
			log.Fatal(err)
		}
		if left == 0 {
			break
		}
	}
	stop()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}

	rows, _ := db.Query(ctx, `SELECT event_id, status FROM inbox ORDER BY event_id`)
	statuses, _ := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ ID, Status string }])
	for _, s := range statuses {
		fmt.Println(s.ID, s.Status)
	}
	rows, _ = db.Query(ctx, `SELECT sku, cents FROM prices ORDER BY sku`)
	prices, _ := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		SKU   string
		Cents int
	}])
	for _, p := range prices {
		fmt.Println(p.SKU, p.Cents)
	}
	// Output:
	// d-1 processed
	// d-2 dead
	// p-1 processed
	// p-2 processed
	// p-3 processed
	// sku-1 120
	// sku-2 250
}

// exampleDatabase creates an empty database on the test server
// (INBOXD_TEST_DATABASE_URL) and returns its URL and what drops it.
func exampleDatabase() (string, func()) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		log.Fatal(err)
	}
	name := pgtest.UniqueName("inboxd_example_")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		log.Fatal(err)
	}
	return pgtest.WithDatabase(pgtest.AdminURL(), name), func() {
		_, _ = admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
		_ = admin.Close(ctx)
	}
}
