package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/migrations"
)

// environment is the PostgreSQL server the measurements run on and the
// databases they made there, dropped by close.
type environment struct {
	adminURL      string
	serverVersion string
	autovacuum    string // the server's autovacuum setting
	keep          bool   // leave the databases for inspection

	// prepare, when set, runs on every database made (the month run's
	// partitioned cluster converts its tables).
	prepare func(ctx context.Context, url string) error
	// cluster is the cluster the bench started for it (month run); nil
	// for the server of INBOXD_TEST_DATABASE_URL.
	cluster *cluster

	mu        sync.Mutex
	databases []string
	template  string // a migrated database the others are copied from
}

func newEnvironment(ctx context.Context, adminURL string) (*environment, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL (set INBOXD_TEST_DATABASE_URL): %w", err)
	}
	defer conn.Close(ctx)
	e := &environment{adminURL: adminURL}
	if err := conn.QueryRow(ctx, "SELECT version(), current_setting('autovacuum')").Scan(&e.serverVersion, &e.autovacuum); err != nil {
		return nil, err
	}
	return e, nil
}

// database is one measurement's database.
type database struct {
	name string
	url  string
}

// newDatabase creates a database holding inboxd's schema (copied from a
// template migrated once per run with migrations.Migrate), dropped by
// env.close or drop.
func (e *environment) newDatabase(ctx context.Context) (*database, error) {
	tmpl, err := e.migratedTemplate(ctx)
	if err != nil {
		return nil, err
	}
	return e.create(ctx, tmpl)
}

func (e *environment) migratedTemplate(ctx context.Context) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.template != "" {
		return e.template, nil
	}
	name := pgtest.UniqueName("inboxd_bench_tmpl_")
	if err := e.adminExec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE template0", name)); err != nil {
		return "", err
	}
	e.databases = append(e.databases, name)
	conn, err := pgx.Connect(ctx, pgtest.WithDatabase(e.adminURL, name))
	if err != nil {
		return "", err
	}
	_, err = migrations.Migrate(ctx, conn)
	conn.Close(ctx)
	if err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	e.template = name
	return name, nil
}

func (e *environment) create(ctx context.Context, template string) (*database, error) {
	name := pgtest.UniqueName("inboxd_bench_")
	if err := e.adminExec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template)); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	e.mu.Lock()
	e.databases = append(e.databases, name)
	e.mu.Unlock()
	db := &database{name: name, url: pgtest.WithDatabase(e.adminURL, name)}
	if e.prepare != nil {
		if err := e.prepare(ctx, db.url); err != nil {
			return nil, fmt.Errorf("prepare database: %w", err)
		}
	}
	return db, nil
}

// drop drops db now, so that its files do not weigh on the measurements
// after it.
func (e *environment) drop(db *database) {
	if e.keep {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = e.adminExec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", db.name))
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, n := range e.databases {
		if n == db.name {
			e.databases = slices.Delete(e.databases, i, i+1)
			break
		}
	}
}

// close drops every database the run made.
func (e *environment) close() {
	if e.keep {
		e.mu.Lock()
		if len(e.databases) > 0 {
			fmt.Printf("databases kept: %s\n", strings.Join(e.databases, " "))
		}
		e.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.mu.Lock()
	names := e.databases
	e.databases = nil
	e.mu.Unlock()
	for i := len(names) - 1; i >= 0; i-- {
		_ = e.adminExec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", names[i]))
	}
}

func (e *environment) adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// open creates a database (as newDatabase) and a pool on it with at most
// conns connections (see openPool); done closes the pool and drops the
// database.
func (e *environment) open(ctx context.Context, conns int32) (db *database, pool *pgxpool.Pool, done func(), err error) {
	if db, err = e.newDatabase(ctx); err != nil {
		return nil, nil, nil, err
	}
	if pool, err = openPool(ctx, db, conns); err != nil {
		e.drop(db)
		return nil, nil, nil, err
	}
	return db, pool, func() { pool.Close(); e.drop(db) }, nil
}

// openPool opens a pool on db with at most conns connections (0 = pgxpool's
// default, max(4, CPUs), as the go test benchmarks have).
func openPool(ctx context.Context, db *database, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		return nil, err
	}
	if conns > 0 {
		cfg.MaxConns = conns
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// gitCommit is the short commit of the working tree, "+dirty" when it has
// changes; "unknown" outside a git checkout.
func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
