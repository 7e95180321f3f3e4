// Package source is the contract between an Inboxd and the sources it
// runs (inboxd.Config.Sources): what a source is before it runs (its
// settings, validated, ready to open), what the Inboxd gives it (the
// database, the logger, the metrics' registerer, the hand-off to its
// workers) and what a running source answers (run, readiness,
// reachability, last progress, liveness); and the same for the outbox
// relay's publishers (inboxd.OutboxConfig.Publishers). The sources are
// built by package ingest (NewKafkaSource, NewAMQPSource, NewNATSSource,
// NewWebhookSource), the publishers by ingest/outboxpub; this package
// links no broker client, so that a program which imports the root
// package and neither of them links none.
package source

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/outbox"
)

// Source is one source's settings, ready to be opened by an Inboxd: an
// element of inboxd.Config.Sources.
type Source interface {
	// Kind names the kind of source, as the metrics' source_kind label
	// and the errors do: kafka, amqp, nats or webhook.
	Kind() string
	// Open validates the settings and builds the source on env, without
	// reaching its broker. With a nil env.Registerer it registers nothing
	// (inboxd.New opens every source so first, to report every bad setting
	// before anything is registered).
	Open(env Env) (Running, error)
}

// Env is what an Inboxd gives the sources it opens.
type Env struct {
	// DB is the engine's pool: the source's inserts.
	DB *pgxpool.Pool
	// Logger receives the source's logs.
	Logger zerolog.Logger
	// Registerer receives its metrics (nil: none are registered).
	Registerer prometheus.Registerer
	// HandOff is this process's worker pool, to which the rows stored are
	// handed while it has idle handlers; nil: every row waits for a claim.
	HandOff HandOff
}

// Running is an opened source.
type Running interface {
	// Run consumes until ctx ends (nil then) or the source fails.
	Run(ctx context.Context) error
	// Ready is nil while the source does its work (persists its batches,
	// is connected), else an error saying what it cannot do, fit for the
	// readiness probe's answer.
	Ready() error
	// Reachable reports whether its broker answers (or, for webhooks, it
	// listens).
	Reachable() bool
	// LastProgress is when it last stored a batch or found nothing to
	// store (zero before).
	LastProgress() time.Time
	// Healthy fails only when restarting the process would help (the
	// Kafka fetch loop stuck); nil for the others.
	Healthy() error
}

// HandOff is the worker pool of the same process, when the sources may
// hand it rows as they are stored (the engine's pool implements it). Each
// batch write asks Reserve which of its rows the pool's idle handlers
// take; the insert writes those reserved for them (driver.InsertBatch);
// once it has committed, Deliver hands over the reserved rows it inserted
// (duplicates are not), and if it failed, Cancel gives the room back.
// Every source's writes go through ingest's one writer, so every source
// hands off.
type HandOff interface {
	// Reserve returns the reservation of the rows the pool takes (nil:
	// none).
	Reserve(rows []driver.NewRow) *driver.Reservation
	// Deliver hands over the reserved rows the committed insert wrote.
	Deliver(ctx context.Context, r *driver.Reservation, rows []driver.NewRow, got []driver.Reserved)
	// Cancel ends a reservation whose insert failed.
	Cancel(r *driver.Reservation)
}

// Publisher is one broker's connection for the outbox relay: an element of
// inboxd.OutboxConfig.Publishers (package ingest/outboxpub makes them).
// Its publisher connects when it first publishes.
type Publisher interface {
	// Kind is the kind of destination it publishes to: kafka, amqp or nats.
	Kind() string
	// OpenPublisher validates the settings and builds the publisher,
	// logging to log; the relay closes it.
	OpenPublisher(log zerolog.Logger) (outbox.Publisher, error)
}
