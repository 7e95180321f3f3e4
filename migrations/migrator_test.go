package migrations

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// TestSplitStatements: semicolons inside quotes, dollar quotes and
// comments do not end a statement.
func TestSplitStatements(t *testing.T) {
	t.Parallel()
	sql := `-- a comment; still a comment
CREATE INDEX CONCURRENTLY a ON t (x);
/* a block; /* nested; */ still */ SELECT 'it''s; one', E'\'; two', "odd;name" FROM t;
DO $body$ BEGIN PERFORM 1; END $body$;
SELECT $$;$$;
  `
	got := splitStatements(sql)
	want := []string{
		"-- a comment; still a comment\nCREATE INDEX CONCURRENTLY a ON t (x);",
		`/* a block; /* nested; */ still */ SELECT 'it''s; one', E'\'; two', "odd;name" FROM t;`,
		"DO $body$ BEGIN PERFORM 1; END $body$;",
		"SELECT $$;$$;",
	}
	if !slices.Equal(got, want) {
		t.Errorf("splitStatements:\n got %q\nwant %q", got, want)
	}
}

// TestLoadMigrationsRefusesGapsAndClashes, as tern did.
func TestLoadMigrationsRefusesGapsAndClashes(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name string
		fsys fstest.MapFS
		want string
	}{
		{"gap", fstest.MapFS{"001_a.sql": file("SELECT 1;"), "003_c.sql": file("SELECT 3;")}, "missing migration 2"},
		{"clash", fstest.MapFS{"001_a.sql": file("SELECT 1;"), "01_b.sql": file("SELECT 1;")}, "duplicate migration 1"},
		{"no SQL", fstest.MapFS{"001_a.sql": file("-- nothing\n---- create above / drop below ----\nDROP TABLE t;")}, "no SQL"},
		{"none", fstest.MapFS{"README.md": file("x")}, "migrations not found"},
	} {
		if _, err := loadMigrations(tc.fsys); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	ms, err := loadMigrations(files)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.version != int32(i+1) {
			t.Errorf("migration %s has version %d, want %d", m.name, m.version, i+1)
		}
	}
	if !ms[3].noTx || ms[0].noTx {
		t.Errorf("004 runs outside a transaction, 001 inside one: got %v, %v", ms[3].noTx, ms[0].noTx)
	}
}
