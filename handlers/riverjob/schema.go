package riverjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/inboxd/inboxd/migrations"
)

// ErrSchemaMissing is returned (wrapped) by CheckSchema when River's
// migrations have not all been applied.
var ErrSchemaMissing = errors.New("the River schema is missing or out of date")

// CheckSchema reports whether every River migration this inboxd knows has
// been applied on pool's database (River's tables in the search_path). It
// only reads, in a read-only transaction. When migrations are missing it
// returns an error wrapping ErrSchemaMissing that lists them and says to
// run `inboxd migrate --river`; any other error means the question could
// not be asked.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := newMigrator(pool, nil)
	if err != nil {
		return err
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("check River's schema: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	res, err := m.ValidateTx(ctx, tx, nil)
	if err != nil {
		return fmt.Errorf("check River's schema: %w", err)
	}
	if !res.OK {
		return fmt.Errorf("%w (%s): run `inboxd migrate --river`", ErrSchemaMissing, strings.Join(res.Messages, "; "))
	}
	return nil
}

// MigrateResult reports what Migrate did.
type MigrateResult struct {
	// From is the highest River migration version applied before, 0 for
	// none.
	From int
	// To is the highest River migration version applied after.
	To int
	// Applied lists the versions Migrate applied, in order; empty when the
	// schema was up to date.
	Applied []int
}

// lockKey is the advisory lock Migrate holds while River's migrations run
// ("inboxd" in ASCII, then 2; inboxd's own migrations use 1).
const lockKey = 0x696e626f78640002

// Migrate applies River's pending migrations to pool's database, each in a
// transaction of its own, with River's migrator (rivermigrate), in the
// search_path's first schema. It serialises concurrent callers with a
// PostgreSQL advisory lock held on one of pool's connections while River
// migrates on another, so pool must allow at least two connections.
// logger receives River's migration logs; nil discards them.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (MigrateResult, error) {
	if pool.Config().MaxConns < 2 {
		return MigrateResult{}, errors.New("migrate River's schema: the pool must allow at least 2 connections")
	}
	m, err := newMigrator(pool, logger)
	if err != nil {
		return MigrateResult{}, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return MigrateResult{}, fmt.Errorf("migrate River's schema: %w", err)
	}
	defer conn.Release()
	if err := lock(ctx, conn.Conn()); err != nil {
		return MigrateResult{}, err
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(lockKey))
	}()

	before, err := m.ExistingVersions(ctx)
	if err != nil {
		return MigrateResult{}, fmt.Errorf("read River's schema version: %w", err)
	}
	res := MigrateResult{From: highest(before)}
	out, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return MigrateResult{}, fmt.Errorf("apply River's migrations: %w", err)
	}
	res.To = res.From
	for _, v := range out.Versions {
		res.Applied = append(res.Applied, v.Version)
		res.To = max(res.To, v.Version)
	}
	return res, nil
}

// newMigrator returns River's migrator on pool.
func newMigrator(pool *pgxpool.Pool, logger *slog.Logger) (*rivermigrate.Migrator[pgx.Tx], error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river migrator: %w", err)
	}
	return m, nil
}

// highest returns the highest version in ms, 0 when there is none.
func highest(ms []rivermigrate.Migration) int {
	v := 0
	for _, m := range ms {
		v = max(v, m.Version)
	}
	return v
}

// lock takes Migrate's advisory lock, polling, so that the session never
// waits inside a statement (where statement_timeout would end the wait).
func lock(ctx context.Context, conn *pgx.Conn) error {
	if err := migrations.PollAdvisoryLock(ctx, conn, lockKey); err != nil {
		return fmt.Errorf("take River's migration lock: %w", err)
	}
	return nil
}
