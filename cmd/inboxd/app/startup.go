package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
			return fmt.Errorf("database: %s (giving up after %s: retrying cannot fix this)", reason, permanentStartupGrace)
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
		return nil, fmt.Errorf("connect to %s: %w", cfg.Redacted(), err)
	}
	return conn, nil
}

func newLogger(cfg config.Config, w io.Writer) zerolog.Logger {
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		level = zerolog.InfoLevel
	}
	if cfg.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	host, _ := os.Hostname()
	return zerolog.New(w).Level(level).With().Timestamp().Str("host", host).Logger()
}
