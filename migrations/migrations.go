// Package migrations holds inboxd's SQL schema as embedded, numbered
// migrations and applies them with jackc/tern.
//
// Migrate takes tern's PostgreSQL advisory lock for the whole run, so several
// replicas may call it at once at start-up: one applies the pending migrations,
// the others wait and then find nothing left to do.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// VersionTable is the table in which the applied schema version is recorded.
// It is created unqualified, in the first schema of the connection's
// search_path, next to the inbox table.
const VersionTable = "inboxd_schema_version"

//go:embed *.sql
var files embed.FS

// Result reports what a call to Migrate did.
type Result struct {
	// From is the schema version found before migrating.
	From int32
	// To is the schema version after migrating.
	To int32
}

// Migrate applies every pending migration on conn. It is safe to run
// concurrently from several processes against the same database.
func Migrate(ctx context.Context, conn *pgx.Conn) (Result, error) {
	m, err := newMigrator(ctx, conn)
	if err != nil {
		return Result{}, err
	}
	from, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("read schema version: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return Result{}, fmt.Errorf("apply migrations: %w", err)
	}
	to, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("read schema version: %w", err)
	}
	return Result{From: from, To: to}, nil
}

// Status reports the schema version applied on conn and the latest version
// this binary knows.
func Status(ctx context.Context, conn *pgx.Conn) (current, latest int32, err error) {
	m, err := newMigrator(ctx, conn)
	if err != nil {
		return 0, 0, err
	}
	current, err = m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read schema version: %w", err)
	}
	return current, int32(len(m.Migrations)), nil
}

func newMigrator(ctx context.Context, conn *pgx.Conn) (*migrate.Migrator, error) {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return nil, fmt.Errorf("prepare migrator: %w", err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return m, nil
}

// Files returns the embedded migration files.
func Files() fs.FS { return files }
