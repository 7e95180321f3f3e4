package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers/riverjob"
	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/migrations"
)

// permanentStartupGrace is how long a permanent connection error (a
// database or role that does not exist, a refused password) is retried at
// start-up before run gives up naming it: long enough for an init job
// creating the database, short enough for a crash loop to show the cause.
const permanentStartupGrace = 10 * time.Second

// waitForDatabase pings until the database answers or ctx is cancelled, so
// the daemon can start before its database. Transient failures (connection
// refused, timeouts) are retried for as long as it takes; a permanent one
// is retried for permanentStartupGrace and then returned, named as it is.
func waitForDatabase(ctx context.Context, db *pgxpool.Pool, log zerolog.Logger) error {
	retry := backoff.NewRetrier(backoff.Exponential{Base: 250 * time.Millisecond, Max: 10 * time.Second})
	var permanentSince time.Time
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := db.Ping(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		permanent, reason := driver.ClassifyConnect(err)
		switch {
		case !permanent:
			permanentSince = time.Time{}
		case permanentSince.IsZero():
			permanentSince = time.Now()
		case time.Since(permanentSince) >= permanentStartupGrace:
			return fmt.Errorf("database: %s (giving up after %s: retrying cannot fix this)%s", reason, permanentStartupGrace, missingDatabaseHint(err))
		}
		delay := retry.Failed()
		msg := "database not reachable yet"
		if permanent {
			msg = "database refuses the connection"
		}
		log.Warn().Str("error", reason).Bool("permanent", permanent).Dur("retry_in", delay).Msg(msg)
		if !backoff.Sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}

// runMigrate applies inboxd's pending migrations and then, with river,
// River's (handlers/riverjob.Migrate, on a pool of two connections on the
// same database URL: one holds River's migration lock while River migrates
// on the other), and reports on stdout what each did.
func runMigrate(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, river bool) error {
	conn, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := migrations.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	switch {
	case res.Ahead:
		_, latest, _ := migrations.Status(ctx, conn)
		fmt.Fprintf(stderr, "inboxd: warning: the schema is at version %d, newer than this inboxd's %d, and compatible with it: nothing to migrate\n", res.To, latest)
	case res.From == res.To:
		fmt.Fprintf(stdout, "schema is up to date at version %d\n", res.To)
	default:
		fmt.Fprintf(stdout, "schema migrated from version %d to %d\n", res.From, res.To)
	}
	if !river {
		return nil
	}
	pool, err := openPool(ctx, cfg, "inboxd-cli", 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	rres, err := riverjob.Migrate(ctx, pool, nil)
	if err != nil {
		return fmt.Errorf("apply the River migrations: %w", err)
	}
	if len(rres.Applied) == 0 {
		fmt.Fprintf(stdout, "River schema is up to date at version %d\n", rres.To)
		return nil
	}
	applied := make([]string, len(rres.Applied))
	for i, v := range rres.Applied {
		applied[i] = strconv.Itoa(v)
	}
	fmt.Fprintf(stdout, "River schema migrated from version %d to %d (applied %s)\n", rres.From, rres.To, strings.Join(applied, ", "))
	return nil
}

// connect opens a single connection with the daemon's session settings.
func connect(ctx context.Context, cfg config.Config) (*pgx.Conn, error) {
	pc, err := cfg.PoolConfig("inboxd-cli", 1)
	if err != nil {
		return nil, usageError{err}
	}
	conn, err := pgx.ConnectConfig(ctx, pc.ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w%s", cfg.Redacted(), err, missingDatabaseHint(err))
	}
	return conn, nil
}

// missingDatabaseHint is what to do about a connection error on a database
// that does not exist (SQLSTATE 3D000, invalid_catalog_name), for the
// error's end; "" for any other error. inboxd creates its tables, never
// the database.
func missingDatabaseHint(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "3D000" {
		return ""
	}
	return "; create the database first (createdb NAME, or CREATE DATABASE NAME as a role allowed to): " +
		"inboxd migrate creates inboxd's tables in an existing database, not the database"
}

// runningSource is one source `inboxd run` starts, as the start-up line
// names it: its kind and what it consumes.
type runningSource struct {
	kind   string
	fields func(e *zerolog.Event)
}

// MarshalZerologObject writes the source as an object of the start-up line.
func (s runningSource) MarshalZerologObject(e *zerolog.Event) {
	e.Str("kind", s.kind)
	s.fields(e)
}

// sourceList is the start-up line's sources array.
type sourceList []runningSource

// MarshalZerologArray writes every source.
func (l sourceList) MarshalZerologArray(a *zerolog.Array) {
	for _, s := range l {
		a.Object(s)
	}
}

// sourcesOf lists the sources cfg runs, in the order they are configured
// in: the start-up line, the warning of a daemon with no source, and the
// check for a publish-only replica read this one list.
func sourcesOf(cfg config.Config) sourceList {
	var out sourceList
	add := func(on bool, kind string, fields func(e *zerolog.Event)) {
		if on {
			out = append(out, runningSource{kind: kind, fields: fields})
		}
	}
	add(cfg.IngestEnabled(), "kafka", func(e *zerolog.Event) { e.Strs("topics", cfg.KafkaTopics).Str("group", cfg.KafkaGroup) })
	add(cfg.AMQPEnabled(), "rabbitmq", func(e *zerolog.Event) { e.Strs("queues", cfg.AMQPQueues) })
	add(cfg.NATSEnabled(), "nats", func(e *zerolog.Event) { e.Strs("streams", cfg.NATSStreams).Str("consumer", cfg.NATSConsumer) })
	add(cfg.WebhookEnabled(), "webhook", func(e *zerolog.Event) { e.Str("listener", cfg.WebhookAddr) })
	return out
}

// outboxBrokers are the brokers the outbox relay of cfg publishes to; nil
// when the relay does not run.
func outboxBrokers(cfg config.Config) []string {
	if !cfg.Outbox {
		return nil
	}
	var out []string
	for _, b := range []struct {
		on   bool
		kind string
	}{{len(cfg.KafkaBrokers) > 0, "kafka"}, {cfg.AMQPURL != "", "rabbitmq"}, {cfg.NATSURL != "", "nats"}} {
		if b.on {
			out = append(out, b.kind)
		}
	}
	return out
}

// logStarting writes the start-up line: the version, the database (its URL
// without the password), each source, the outbox, the console and the
// workers, as configured; and, once, a warning when nothing feeds the
// inbox but other writers' inserts.
func logStarting(log zerolog.Logger, cfg config.Config) {
	engineConns, txConns := cfg.PoolSizes()
	srcs := sourcesOf(cfg)
	console := "off"
	if cfg.HTTPAddr != "" {
		console = cfg.HTTPAddr + "/ui/"
	}
	log.Info().Str("version", versionString()).Str("database", cfg.Redacted()).
		Array("sources", srcs).
		Bool("outbox", cfg.Outbox).Strs("outbox_brokers", outboxBrokers(cfg)).
		Str("console", console).Bool("console_token", cfg.UITokenFile != "").
		Int("workers", cfg.Workers).Dur("lease", cfg.Lease).Int("max_attempts", cfg.MaxAttempts).
		Int("engine_conns", engineConns).Int("tx_conns", txConns).Dur("retention", cfg.Retention).
		Msg("starting")
	if len(srcs) == 0 && !cfg.Outbox {
		log.Warn().Msg("no source (Kafka, RabbitMQ, NATS, webhooks) and no outbox configured: " +
			"this replica only works the rows other writers insert into the inbox table")
	}
}
