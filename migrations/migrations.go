// Package migrations holds inboxd's SQL schema as embedded, numbered
// migrations and applies them (migrator.go: a migrator of its own,
// compatible with the databases jackc/tern migrated before it).
//
// Migrate serialises migrators with a PostgreSQL advisory lock, so several
// replicas may call it at once at start-up: one applies the pending
// migrations, the others wait and then find nothing left to do. They wait by
// polling the lock, never inside a statement: CREATE INDEX CONCURRENTLY waits
// for every open transaction, and a migrator blocked in pg_advisory_lock would
// deadlock with it.
//
// # Rollback
//
// Every migration file declares, on a line of its own,
//
//	-- inboxd:oldest-compatible-schema N
//
// the oldest schema version whose binaries keep working once it is applied:
// an expand migration (a column with a default, an index) keeps them, a
// contract migration (dropping what they use) does not. Migrate records these
// in the table inboxd_schema_compat. A binary older than the database's schema
// reads them: when every migration it does not know keeps it compatible, it
// runs (and Migrate is a no-op with a warning); otherwise it refuses, naming
// the versions. That is what an image rollback needs.
//
// Inspect, which the daemon and the operator commands use, only reads: it
// never creates the version table or anything else.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// VersionTable is the table in which the applied schema version is recorded.
// It is created unqualified, in the first schema of the connection's
// search_path, next to the inbox table.
const VersionTable = "inboxd_schema_version"

// CompatTable records, per applied migration, the oldest schema version whose
// binaries keep working on it.
const CompatTable = "inboxd_schema_compat"

// lockKey is the advisory lock Migrate holds while it migrates ("inboxd" in
// ASCII, then 1).
const lockKey = 0x696e626f78640001

//go:embed *.sql
var files embed.FS

// Result reports what a call to Migrate did.
type Result struct {
	// From is the schema version found before migrating.
	From int32
	// To is the schema version after migrating.
	To int32
	// Ahead is set when the database's schema is newer than this binary's
	// and compatible with it: nothing was applied.
	Ahead bool
}

// State is what Inspect found.
type State struct {
	// Current is the schema version applied to the database (0: none).
	Current int32
	// Latest is the newest schema version this binary knows.
	Latest int32
	// OldestCompatible is, when Current > Latest, the oldest schema version
	// whose binaries the newer migrations keep working; 0 when unknown.
	OldestCompatible int32
}

// Compatible reports whether this binary can run on the database's schema:
// the same version, or a newer one whose every unknown migration keeps this
// binary's version working. An older schema needs Migrate first.
func (s State) Compatible() bool {
	switch {
	case s.Current == s.Latest:
		return true
	case s.Current < s.Latest:
		return false
	default:
		return s.OldestCompatible > 0 && s.OldestCompatible <= s.Latest
	}
}

// Ahead reports whether the database's schema is newer than this binary's.
func (s State) Ahead() bool { return s.Current > s.Latest }

// Err explains, when the binary cannot run on the schema, why and what to do.
func (s State) Err() error {
	switch {
	case s.Compatible():
		return nil
	case s.Current == 0:
		return errors.New("the inbox schema does not exist yet: run `inboxd migrate` first (or `inboxd run --migrate`)")
	case s.Current < s.Latest:
		return fmt.Errorf("database schema is at version %d, this inboxd needs %d: run `inboxd migrate` first (or `inboxd run --migrate`)",
			s.Current, s.Latest)
	case s.OldestCompatible == 0:
		return fmt.Errorf("database schema is at version %d, newer than this inboxd's %d, and records no compatibility: use a newer inboxd",
			s.Current, s.Latest)
	default:
		return fmt.Errorf("database schema is at version %d, which needs inboxd built for schema %d or newer; this one knows %d: use a newer inboxd",
			s.Current, s.OldestCompatible, s.Latest)
	}
}

// Migrate applies every pending migration on conn and records their
// compatibility. It is safe to run concurrently from several processes
// against the same database. On a schema newer than this binary's it applies
// nothing: it returns Result.Ahead when that schema is compatible, and an
// error otherwise.
func Migrate(ctx context.Context, conn *pgx.Conn) (Result, error) {
	if err := lock(ctx, conn); err != nil {
		return Result{}, err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(lockKey)) }()

	st, err := Inspect(ctx, conn)
	if err != nil {
		return Result{}, err
	}
	if st.Ahead() {
		if !st.Compatible() {
			return Result{}, st.Err()
		}
		return Result{From: st.Current, To: st.Current, Ahead: true}, nil
	}
	ms, err := loadMigrations(files)
	if err != nil {
		return Result{}, fmt.Errorf("load migrations: %w", err)
	}
	to, err := applyPending(ctx, conn, ms)
	if err != nil {
		return Result{}, fmt.Errorf("apply migrations: %w", err)
	}
	if err := recordCompat(ctx, conn, to); err != nil {
		return Result{}, err
	}
	return Result{From: st.Current, To: to}, nil
}

// lock takes the migration lock, polling so that this session never waits
// inside a statement (see the package documentation).
func lock(ctx context.Context, conn *pgx.Conn) error {
	if err := PollAdvisoryLock(ctx, conn, lockKey); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	return nil
}

// PollAdvisoryLock takes the session-level advisory lock key on conn,
// trying every 200ms until it is free or ctx ends. Polling rather than
// pg_advisory_lock keeps the session from waiting inside a statement, where
// statement_timeout (or a proxy's idle cut) would end the wait with an error
// instead of a retry. The caller releases it with pg_advisory_unlock.
func PollAdvisoryLock(ctx context.Context, conn *pgx.Conn, key int64) error {
	for {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// recordCompat writes the compatibility of every embedded migration up to
// version to.
func recordCompat(ctx context.Context, conn *pgx.Conn, to int32) error {
	compat, err := Compat()
	if err != nil {
		return err
	}
	var versions, oldest []int32
	for v := int32(1); v <= to && int(v) <= len(compat); v++ {
		versions = append(versions, v)
		oldest = append(oldest, compat[v-1])
	}
	if len(versions) == 0 || to < 5 { // the table arrives with migration 5
		return nil
	}
	_, err = conn.Exec(ctx, `
		INSERT INTO `+CompatTable+` (version, oldest_compatible)
		SELECT * FROM unnest($1::int[], $2::int[])
		ON CONFLICT (version) DO UPDATE SET oldest_compatible = EXCLUDED.oldest_compatible`, versions, oldest)
	if err != nil {
		return fmt.Errorf("record schema compatibility: %w", err)
	}
	return nil
}

// Inspect reports the schema version applied on q, the latest version this
// binary knows and, for a newer schema, what it keeps compatible. It only
// reads: it creates nothing, so a runtime role without DDL rights can call it.
func Inspect(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (State, error) {
	compat, err := Compat()
	if err != nil {
		return State{}, err
	}
	st := State{Latest: int32(len(compat))}
	err = q.QueryRow(ctx, "SELECT version FROM "+VersionTable).Scan(&st.Current)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // no version table: nothing applied
		return st, nil
	case errors.Is(err, pgx.ErrNoRows):
		return st, nil
	case err != nil:
		return State{}, fmt.Errorf("read schema version: %w", err)
	}
	if st.Current > st.Latest {
		var oldest *int32
		err := q.QueryRow(ctx, "SELECT max(oldest_compatible) FROM "+CompatTable+" WHERE version > $1", st.Latest).Scan(&oldest)
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "42P01":
		case err != nil:
			return State{}, fmt.Errorf("read schema compatibility: %w", err)
		case oldest != nil:
			st.OldestCompatible = *oldest
		}
	}
	return st, nil
}

// Status reports the schema version applied on conn and the latest version
// this binary knows. It only reads (see Inspect).
func Status(ctx context.Context, conn *pgx.Conn) (current, latest int32, err error) {
	st, err := Inspect(ctx, conn)
	return st.Current, st.Latest, err
}

var compatLine = regexp.MustCompile(`(?m)^-- inboxd:oldest-compatible-schema (\d+)$`)

// Compat returns, for every embedded migration in order, the oldest schema
// version its `inboxd:oldest-compatible-schema` line declares.
func Compat() ([]int32, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(names))
	for i, name := range names {
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, err
		}
		m := compatLine.FindAllSubmatch(b, -1)
		if len(m) != 1 {
			return nil, fmt.Errorf("migration %s: want exactly one %q line, found %d", name, "-- inboxd:oldest-compatible-schema N", len(m))
		}
		n, _ := strconv.Atoi(string(m[0][1]))
		if n < 1 || n > i+1 {
			return nil, fmt.Errorf("migration %s: oldest compatible schema %d is not between 1 and its own version %d", name, n, i+1)
		}
		out[i] = int32(n)
	}
	return out, nil
}

// Files returns the embedded migration files.
func Files() fs.FS { return files }
