// Package pgtest gives each test its own freshly migrated PostgreSQL
// database on the real server.
//
// The server is taken from INBOXD_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). The schema is
// migrated once into a template database per migration set; every test then
// gets a cheap copy (CREATE DATABASE … TEMPLATE) that is dropped when the test
// ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/migrations"
)

// DefaultAdminURL is used when INBOXD_TEST_DATABASE_URL is not set.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL returns the URL of the server's maintenance database used to
// create and drop test databases.
func AdminURL() string {
	if u := os.Getenv("INBOXD_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// DB is one test's database.
type DB struct {
	// Name is the database name.
	Name string
	// URL connects to the database.
	URL string
	// Pool is a pool on the database, closed when the test ends.
	Pool *pgxpool.Pool
}

var (
	templateMu   sync.Mutex
	templateName string
)

// template returns the migrated template database's name, making it if
// needed (again, when remake is set).
func template(ctx context.Context, remake bool) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if templateName == "" || remake {
		name, err := ensureTemplate(ctx)
		if err != nil {
			return "", fmt.Errorf("pgtest: prepare template database: %w", err)
		}
		templateName = name
	}
	return templateName, nil
}

// New creates a migrated database for t, and drops it when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	return NewEmpty(t, true)
}

// NewEmpty creates a database for t. When migrated is false the database has
// no inbox schema at all (for migration tests).
func NewEmpty(t testing.TB, migrated bool) *DB {
	t.Helper()
	db, drop, err := create(migrated)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Error(err)
		}
	})
	return db
}

// Open creates a migrated database where there is no test to own it (a
// TestMain, for the package's Examples), and returns the function that
// closes its pool and drops it.
func Open() (*DB, func() error, error) { return create(true) }

// create creates a database, migrated or empty, and returns the function
// that closes its pool and drops it.
func create(migrated bool) (*DB, func() error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tmpl := "template0"
	if migrated {
		var err error
		if tmpl, err = template(ctx, false); err != nil {
			return nil, nil, err
		}
	}

	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return nil, nil, fmt.Errorf("pgtest: connect to PostgreSQL (set INBOXD_TEST_DATABASE_URL): %w", err)
	}
	defer admin.Close(ctx)

	name := UniqueName("inboxd_test_")
	_, err = admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl))
	var pgErr *pgconn.PgError
	if migrated && errors.As(err, &pgErr) && pgErr.Code == "3D000" {
		// A test binary built from another migration set (another checkout
		// testing at the same time) dropped our template as stale: make it
		// again.
		if tmpl, err = template(ctx, true); err != nil {
			return nil, nil, err
		}
		_, err = admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("pgtest: create database: %w", err)
	}
	dbURL := WithDatabase(AdminURL(), name)

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, fmt.Errorf("pgtest: open pool: %w", err)
	}
	drop := func() error {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			return fmt.Errorf("pgtest: connect to drop %s: %w", name, err)
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			return fmt.Errorf("pgtest: drop %s: %w", name, err)
		}
		return nil
	}
	return &DB{Name: name, URL: dbURL, Pool: pool}, drop, nil
}

// ensureTemplate creates (once per migration set, across processes) a
// template database holding the migrated schema.
func ensureTemplate(ctx context.Context) (string, error) {
	sum, err := migrationsDigest()
	if err != nil {
		return "", err
	}
	name := "inboxd_tmpl_" + sum[:12]

	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL (set INBOXD_TEST_DATABASE_URL): %w", err)
	}
	defer admin.Close(ctx)

	// Test binaries of several packages run in parallel: serialise creation.
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(727270001)"); err != nil {
		return "", err
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(727270001)") //nolint:errcheck

	var exists bool
	if err := admin.QueryRow(ctx,
		"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	dropStaleTemplates(ctx, admin, name)
	if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s", name)); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE template0", name)); err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, WithDatabase(AdminURL(), name))
	if err != nil {
		return "", err
	}
	_, err = migrations.Migrate(ctx, conn)
	conn.Close(ctx)
	if err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH is_template true", name)); err != nil {
		return "", err
	}
	return name, nil
}

// dropStaleTemplates removes templates left by earlier migration sets, so
// changing a migration does not leave a database behind on the server. A
// template still in use is left alone, and so is one made within the last
// hour (by its PG_VERSION file's time): another checkout testing another
// migration set at the same time uses it, and dropping it made that
// checkout's next tests fail to create their databases (SQLSTATE 3D000)
// while the two rebuilt and dropped each other's templates.
func dropStaleTemplates(ctx context.Context, admin *pgx.Conn, keep string) {
	rows, err := admin.Query(ctx,
		`SELECT datname FROM pg_database WHERE datname LIKE 'inboxd\_tmpl\_%' AND datname <> $1
		   AND (pg_stat_file('base/' || oid || '/PG_VERSION', true)).modification < now() - interval '1 hour'`, keep)
	if err != nil {
		return
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, db := range stale {
		if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH is_template false", db)); err != nil {
			continue
		}
		if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE %s", db)); err != nil {
			_, _ = admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH is_template true", db))
		}
	}
}

func migrationsDigest() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.Files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.Files(), path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// WithDatabase returns the server URL u pointing at database name instead
// (it panics when u is not a URL: INBOXD_TEST_DATABASE_URL must be one).
func WithDatabase(u, name string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		panic(fmt.Sprintf("pgtest: INBOXD_TEST_DATABASE_URL must be a postgres:// URL: %v", err))
	}
	parsed.Path = "/" + name
	return parsed.String()
}

// UniqueName returns prefix followed by 12 random hex digits: a database
// name no other test or run uses.
func UniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// TestingM is what a TestMain runs: *testing.M, or a wrapper of it.
type TestingM interface{ Run() int }

// MainWithDatabase wraps m (a TestMain's *testing.M) so that its Run runs the
// tests and Examples with a migrated database of their own named by the
// environment variable env (DATABASE_URL, as a service's configuration
// would name its database), dropped after; for the Examples, which have no
// t to call New with. Hand the result to goleak.VerifyTestMain.
func MainWithDatabase(m TestingM, env string) TestingM { return withDatabase{m, env} }

type withDatabase struct {
	m   TestingM
	env string
}

func (w withDatabase) Run() int {
	db, drop, err := Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Setenv(w.env, db.URL); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := w.m.Run()
	if err := drop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

// Unreachable returns a pool on a database that never answers (nothing
// listens on its port), closed when t ends: for the parts that decide, or
// start and stop, without a database. The pool connects only when used.
func Unreachable(t testing.TB) *pgxpool.Pool {
	t.Helper()
	db, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}
