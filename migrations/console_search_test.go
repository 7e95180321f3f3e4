package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/migrations"
)

// searchVersion is the version of the error text's index's migration
// (NNN_console_search.sql).
func searchVersion(t *testing.T) int32 {
	t.Helper()
	names, err := fs.Glob(migrations.Files(), "*_console_search.sql")
	if err != nil || len(names) != 1 {
		t.Fatalf("the console search's migration: %v, %v", names, err)
	}
	v, err := strconv.Atoi(strings.SplitN(names[0], "_", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	return int32(v)
}

// errorIndexState is what a database holds of the error text's index
// (migration 21): whether the inbox's is there and valid, how many
// partitions the inbox has and how many of them have theirs attached.
func errorIndexState(t *testing.T, db *pgxpool.Pool) (valid bool, parts, indexed int) {
	t.Helper()
	err := db.QueryRow(context.Background(), `
		SELECT coalesce((SELECT x.indisvalid FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_am a ON a.oid = c.relam
		                 WHERE x.indexrelid = to_regclass('inbox_error_trgm_idx') AND x.indrelid = to_regclass('inbox')
		                   AND a.amname = 'gin' AND pg_get_indexdef(x.indexrelid) LIKE '%gin_trgm_ops%'), false),
		       (SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass('inbox')),
		       (SELECT count(*) FROM pg_inherits ii JOIN pg_index x ON x.indexrelid = ii.inhrelid
		        JOIN pg_inherits pi ON pi.inhrelid = x.indrelid AND pi.inhparent = to_regclass('inbox')
		        WHERE ii.inhparent = to_regclass('inbox_error_trgm_idx') AND x.indisvalid)`).Scan(&valid, &parts, &indexed)
	if err != nil {
		t.Fatal(err)
	}
	return valid, parts, indexed
}

// The error text's index is built on both shapes of the inbox: on the
// plain table; on a partitioned one, every partition's, attached to the
// parent's (so the parent's is valid), whether the table was partitioned
// before migration 21 ran or after, and on the partitions created later.
func TestErrorSearchIndexOnEveryShape(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	plain := pgtest.NewPlain(t)
	if valid, parts, _ := errorIndexState(t, plain.Pool); !valid || parts != 0 {
		t.Errorf("plain inbox: index valid %v, %d partitions", valid, parts)
	}

	// Converted after migration 21: the conversion carries the index.
	part := pgtest.NewPartitioned(t)
	if valid, parts, indexed := errorIndexState(t, part.Pool); !valid || parts < 2 || indexed != parts {
		t.Errorf("converted inbox: index valid %v, %d of %d partitions indexed", valid, indexed, parts)
	}

	// Converted before: the migration applied to a partitioned inbox.
	v := searchVersion(t)
	if _, err := part.Pool.Exec(ctx, `DROP INDEX inbox_error_trgm_idx;
		UPDATE `+migrations.VersionTable+` SET version = `+strconv.Itoa(int(v-1))); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, part.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	res, err := migrations.Migrate(ctx, conn)
	if err != nil || res.From != v-1 || res.To < v {
		t.Fatalf("migrate a partitioned inbox from %d: %+v, %v", v-1, res, err)
	}
	valid, parts, indexed := errorIndexState(t, part.Pool)
	if !valid || parts < 2 || indexed != parts {
		t.Errorf("migrated partitioned inbox: index valid %v, %d of %d partitions indexed", valid, indexed, parts)
	}
	// Nothing left to build; a partition created later has its own.
	var left int
	if err := part.Pool.QueryRow(ctx, `SELECT count(*) FROM inboxd_error_index_builds()`).Scan(&left); err != nil || left != 1 {
		// the parent's CREATE INDEX IF NOT EXISTS … ON ONLY, a no-op
		t.Errorf("statements left to build: %d, %v", left, err)
	}
	if _, err := part.Pool.Exec(ctx, `SELECT inboxd_partition_create('inbox', (SELECT max(gen) + 1 FROM inboxd_partitions('inbox')))`); err != nil {
		t.Fatal(err)
	}
	if valid, now, indexed := errorIndexState(t, part.Pool); !valid || now != parts+1 || indexed != now {
		t.Errorf("after a new partition: index valid %v, %d of %d partitions indexed", valid, indexed, now)
	}
}

// A migrator that may not create pg_trgm, on a server where nobody did:
// migration 21 builds nothing, and succeeds.
func TestErrorSearchMigrationWithoutTheExtension(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	role := "inboxd_t_notrgm_" + hex.EncodeToString(b)
	t.Cleanup(func() { // after the database is dropped
		admin, err := pgx.Connect(context.Background(), pgtest.AdminURL())
		if err != nil {
			t.Error(err)
			return
		}
		defer admin.Close(context.Background())
		if _, err := admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Error(err)
		}
	})
	db := pgtest.NewPlain(t)
	if _, err := db.Pool.Exec(ctx, `CREATE ROLE `+role+` LOGIN;
		GRANT CREATE ON SCHEMA public TO `+role+`;
		GRANT SELECT, UPDATE ON `+migrations.VersionTable+` TO `+role+`;
		GRANT SELECT, INSERT, UPDATE ON `+migrations.CompatTable+` TO `+role+`;
		DROP EXTENSION pg_trgm CASCADE;
		DROP FUNCTION inboxd_error_index_builds();
		UPDATE `+migrations.VersionTable+` SET version = `+strconv.Itoa(int(searchVersion(t))-1)); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	res, err := migrations.Migrate(ctx, conn)
	if err != nil || res.To < searchVersion(t) {
		t.Fatalf("migrate without pg_trgm: %+v, %v", res, err)
	}
	var ext, idx bool
	if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_trgm'),
		to_regclass('inbox_error_trgm_idx') IS NOT NULL`).Scan(&ext, &idx); err != nil || ext || idx {
		t.Errorf("pg_trgm created %v, index built %v (%v)", ext, idx, err)
	}
}
