// Package source is the contract between an Inboxd and the sources it
// runs (inboxd.Config.Sources): what a source is before it runs (its
// settings, validated, ready to open), what the Inboxd gives it (the
// database, the logger, the metrics' registerer, the hand-off to its
// workers) and what a running source answers (run, readiness,
// reachability, last progress, liveness); and the same for the outbox
// relay's publishers (inboxd.OutboxConfig.Publishers). The sources are
// built by a package of their kind each (the New of ingest/kafka,
// ingest/amqp, ingest/nats, ingest/webhook), the publishers by the same
// packages (the Publisher of ingest/kafka, ingest/amqp, ingest/nats); this
// package links no broker client, so that a program which imports the root
// package and none of them links none, and one that imports one source's
// package links that broker's client alone.
package source

import (
	"context"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
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
	// HandOff is set by the Inboxd to its worker pool's hand-off: the
	// rows stored are handed to its idle handlers while it has some. Nil:
	// every row waits for a claim. Its type is the engine's own (an
	// embedder leaves it nil; Open ignores any other value).
	HandOff any
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

// Publisher is one broker's connection for the outbox relay: an element of
// inboxd.OutboxConfig.Publishers (the Publisher of ingest/kafka, ingest/amqp
// or ingest/nats makes one).
// Its publisher connects when it first publishes.
type Publisher interface {
	// Kind is the kind of destination it publishes to: kafka, amqp or nats.
	Kind() string
	// OpenPublisher validates the settings and builds the publisher,
	// logging to log; the relay closes it. What it returns is the relay's
	// own kind of publisher, which the Inboxd alone uses.
	OpenPublisher(log zerolog.Logger) (io.Closer, error)
}
