package migrations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/migrations"
)

// TestMigratesWhatTernMigrated: a database tern brought to version 9 (its
// version table, its marker handling) is taken on by this migrator, which
// applies the rest and ends with the schema of a database it migrated
// alone.
func TestMigratesWhatTernMigrated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	byTern, fresh := pgtest.NewEmpty(t, false), pgtest.NewEmpty(t, false)
	tc, err := pgx.Connect(ctx, byTern.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close(ctx)
	m, err := migrate.NewMigrator(ctx, tc, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.Files()); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 9); err != nil {
		t.Fatalf("tern: %v", err)
	}
	res, err := migrations.Migrate(ctx, tc)
	if err != nil {
		t.Fatalf("migrate after tern: %v", err)
	}
	latest := int32(len(m.Migrations))
	if res.From != 9 || res.To != latest {
		t.Fatalf("migrate after tern: %+v, want from 9 to %d", res, latest)
	}
	fc, err := pgx.Connect(ctx, fresh.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close(ctx)
	if _, err := migrations.Migrate(ctx, fc); err != nil {
		t.Fatal(err)
	}
	if a, b := schemaOf(ctx, t, tc), schemaOf(ctx, t, fc); a != b {
		t.Errorf("the schema after tern then this migrator differs from this migrator's alone:\n%s\n---\n%s", a, b)
	}
}

// schemaOf describes the public schema's tables, columns, indexes and
// constraints.
func schemaOf(ctx context.Context, t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	rows, err := conn.Query(ctx, `
		SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || coalesce(column_default, '') || ' ' || is_nullable
		  FROM information_schema.columns WHERE table_schema = 'public'
		UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
		UNION ALL SELECT 'constraint ' || conrelid::regclass || ' ' || pg_get_constraintdef(oid)
		  FROM pg_constraint WHERE connamespace = 'public'::regnamespace
		UNION ALL SELECT 'version ' || version FROM `+migrations.VersionTable+`
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
