package driver

import (
	"context"
	"embed"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the statements run on: a *pgxpool.Pool, a *pgxpool.Conn, a
// *pgx.Conn or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// files holds every statement, one per file.
//
//go:embed sql/*.sql
var files embed.FS

// load returns the statement in sql/name as written.
func load(name string) string {
	b, err := files.ReadFile("sql/" + name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// render renders the text/template sql/name with data; the templates in
// shared (file names in sql/) are there to call.
func render(name string, data any, shared ...string) string {
	patterns := []string{"sql/" + name}
	for _, s := range shared {
		patterns = append(patterns, "sql/"+s)
	}
	t := template.Must(template.New(name).ParseFS(files, patterns...))
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, name, data); err != nil {
		panic(err)
	}
	return b.String()
}

// Channel is the channel the inbox table's insert trigger
// (migrations/001_inbox.sql) notifies on when a row becomes due, and that
// Notify notifies on: workers LISTEN on it.
const Channel = "inboxd_received"

// ListenSQL is the statement that subscribes a session to Channel.
const ListenSQL = "LISTEN " + Channel

var notifySQL = load("notify.sql")

// Notify wakes the workers of every replica now rather than at their next
// poll (after a requeue, or a completion that made rows due).
func Notify(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, notifySQL)
	return err
}
