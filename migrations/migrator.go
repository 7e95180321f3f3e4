package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The migrator is ours, written for the subset of jackc/tern that inboxd's
// migrations use and compatible with the databases tern migrated: the same
// version table (one row, one int4 column "version", created with a 0 row
// when missing), the same file names (NNN_name.sql, numbered from 1 with
// no gap and no clash), the same markers ("---- tern: disable-tx ----" runs
// a migration outside a transaction, one statement at a time; "---- create
// above / drop below ----" ends the part applied), each migration and its
// version update committed together. One marker is ours: in a migration
// outside a transaction, a statement whose text holds the line
// "-- inboxd:run-each-row" is a query whose rows are statements, each run
// in turn (psql's \gexec: CREATE INDEX CONCURRENTLY once per partition of
// a partitioned table, which no function can run). tern linked 11 modules (sprig and its
// dependencies, for templates inboxd's migrations never used: an embedder
// of the root package linked 39 modules and 25.3 MB with it, 27 and 24.1 MB
// without). Migrate runs it under the migration lock, so tern's own
// advisory lock, taken within it, is not taken.

var (
	// migrationName is the form of a migration file's name: its version,
	// an underscore, a name.
	migrationName = regexp.MustCompile(`\A(\d+)_.+\.sql\z`)
	// noTxMarker marks a migration run outside a transaction.
	noTxMarker = regexp.MustCompile(`(?m)^---- tern: disable-tx ----$`)
	// eachRowMarker marks, in a migration outside a transaction, a query
	// whose rows' first column are statements to run one by one.
	eachRowMarker = regexp.MustCompile(`(?m)^-- inboxd:run-each-row$`)
)

// downMarker ends the part of a migration file that is applied.
const downMarker = "---- create above / drop below ----"

// migration is one migration file, ready to apply.
type migration struct {
	version int32
	name    string // the file's name
	sql     string // the part applied
	noTx    bool   // run outside a transaction, statement by statement
}

// loadMigrations reads the migrations of fsys's top directory, in version
// order, refusing two files of one version, a missing version and a
// migration with no SQL.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]string{}
	top := 0
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if e.IsDir() || m == nil {
			continue
		}
		n, err := strconv.ParseInt(m[1], 10, 32)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("migration %s: its number is not a version from 1", e.Name())
		}
		if byVersion[int(n)] != "" {
			return nil, fmt.Errorf("duplicate migration %d: %s and %s", n, byVersion[int(n)], e.Name())
		}
		byVersion[int(n)] = e.Name()
		top = max(top, int(n))
	}
	if top == 0 {
		return nil, errors.New("migrations not found")
	}
	out := make([]migration, 0, top)
	for v := 1; v <= top; v++ {
		name := byVersion[v]
		if name == "" {
			return nil, fmt.Errorf("missing migration %d", v)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		up, _, _ := strings.Cut(string(body), downMarker)
		up = strings.TrimSpace(up)
		if !hasSQL(up) {
			return nil, fmt.Errorf("migration %s: no SQL in the part applied", name)
		}
		out = append(out, migration{version: int32(v), name: name, sql: up, noTx: noTxMarker.MatchString(up)})
	}
	return out, nil
}

// hasSQL reports whether sql holds a line that is neither blank nor a
// comment.
func hasSQL(sql string) bool {
	for _, line := range strings.Split(sql, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
			return true
		}
	}
	return false
}

// ensureVersionTable creates the version table, holding version 0, when
// the search_path shows none.
func ensureVersionTable(ctx context.Context, conn *pgx.Conn) error {
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_class WHERE relname = $1 AND relkind = 'r' AND pg_table_is_visible(oid)",
		VersionTable).Scan(&n); err != nil {
		return fmt.Errorf("look for the version table: %w", err)
	}
	if n > 0 {
		return nil
	}
	_, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+VersionTable+`(version int4 NOT NULL);
		INSERT INTO `+VersionTable+`(version) SELECT 0 WHERE 0 = (SELECT count(*) FROM `+VersionTable+`)`)
	if err != nil {
		return fmt.Errorf("create the version table: %w", err)
	}
	return nil
}

// currentVersion reads the version table.
func currentVersion(ctx context.Context, conn *pgx.Conn) (int32, error) {
	var v int32
	err := conn.QueryRow(ctx, "SELECT version FROM "+VersionTable).Scan(&v)
	return v, err
}

// applyPending applies, in order, the migrations of ms above the version
// table's version, each with its version update in one transaction (or,
// for a migration marked so, statement by statement outside one, the
// version updated after the last), and returns the version reached.
func applyPending(ctx context.Context, conn *pgx.Conn, ms []migration) (int32, error) {
	if err := ensureVersionTable(ctx, conn); err != nil {
		return 0, err
	}
	cur, err := currentVersion(ctx, conn)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if cur < 0 || int(cur) > len(ms) {
		return 0, fmt.Errorf("current version %d is outside the valid versions of 0 to %d", cur, len(ms))
	}
	for _, m := range ms[cur:] {
		if err := apply(ctx, conn, m); err != nil {
			return cur, err
		}
		cur = m.version
	}
	return cur, nil
}

// apply applies m and records its version.
func apply(ctx context.Context, conn *pgx.Conn, m migration) error {
	if m.noTx {
		for _, stmt := range splitStatements(m.sql) {
			if err := execStatement(ctx, conn, stmt); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
		}
		return setVersion(ctx, conn, m.version)
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		return setVersion(ctx, conn, m.version)
	})
}

// execStatement runs stmt, one statement of a migration outside a
// transaction; a statement marked "-- inboxd:run-each-row" is a query
// whose rows' first column (text) are statements, read whole and then run
// in turn.
func execStatement(ctx context.Context, conn *pgx.Conn, stmt string) error {
	if !eachRowMarker.MatchString(stmt) {
		_, err := conn.Exec(ctx, stmt)
		return err
	}
	rows, err := conn.Query(ctx, stmt, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return err
	}
	each, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, s := range each {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// setVersion records version, after resetting the session's settings (a
// migration may change the search_path, where the version table is
// found).
func setVersion(ctx context.Context, conn *pgx.Conn, version int32) error {
	if _, err := conn.Exec(ctx, "RESET ALL"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "UPDATE "+VersionTable+" SET version = $1", version); err != nil {
		return fmt.Errorf("record schema version %d: %w", version, err)
	}
	return nil
}

// splitStatements splits sql into its statements, each with its ';', at
// the semicolons outside quotes ('…', E'…', "…", $tag$…$tag$) and comments
// (-- to the end of the line, /* … */, nested); blank pieces are dropped.
func splitStatements(sql string) []string {
	var out []string
	add := func(s string) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	start := 0
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ';':
			add(sql[start : i+1])
			i++
			start = i
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if j := strings.IndexByte(sql[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(sql)
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			depth := 0
			for i < len(sql) {
				switch {
				case strings.HasPrefix(sql[i:], "/*"):
					depth++
					i += 2
				case strings.HasPrefix(sql[i:], "*/"):
					depth--
					i += 2
				default:
					i++
				}
				if depth == 0 {
					break
				}
			}
		case c == '\'' || c == '"':
			escapes := c == '\'' && i > 0 && (sql[i-1] == 'e' || sql[i-1] == 'E')
			i++
			for i < len(sql) {
				if escapes && sql[i] == '\\' {
					i += 2
					continue
				}
				if sql[i] == c {
					if i+1 < len(sql) && sql[i+1] == c { // a doubled quote
						i += 2
						continue
					}
					i++
					break
				}
				i++
			}
		case c == '$':
			if tag, ok := dollarTag(sql[i:]); ok {
				if j := strings.Index(sql[i+len(tag):], tag); j >= 0 {
					i += 2*len(tag) + j
				} else {
					i = len(sql)
				}
			} else {
				i++
			}
		default:
			i++
		}
	}
	add(sql[start:])
	if len(out) == 0 {
		return []string{sql}
	}
	return out
}

// dollarTag returns the dollar quote's opening tag s starts with ("$$",
// "$body$"), if it starts with one.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1], true
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || j > 1 && c >= '0' && c <= '9' || c >= 0x80:
		default:
			return "", false
		}
	}
	return "", false
}
