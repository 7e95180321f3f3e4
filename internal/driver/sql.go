package driver

import (
	"context"
	"embed"
	"fmt"
	"regexp"
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

// positionalSQL is a statement whose named arguments (@name) were turned
// into positional ones ($1…) once, at start. pgx.NamedArgs does that on
// every call, scanning the whole text (comments included, a few KiB for
// the completion): a completion batch runs many times a second.
type positionalSQL struct {
	sql   string
	names []string // the name of each positional argument, from $1
}

// positionalVariants is positional of each variant.
func positionalVariants(v [2]string) [2]positionalSQL {
	return [2]positionalSQL{positional(v[0]), positional(v[1])}
}

// positional rewrites sql's named arguments as pgx.NamedArgs does, with
// the same rules (comments, quoted text and casts are left alone).
func positional(sql string) positionalSQL {
	// Each name is its own value: the rewritten arguments are the names, in
	// the order of their placeholders.
	names := pgx.NamedArgs{}
	for _, m := range namedArg.FindAllStringSubmatch(sql, -1) {
		names[m[1]] = m[1]
	}
	out, args, err := names.RewriteQuery(context.Background(), nil, sql, nil)
	if err != nil {
		panic(fmt.Sprintf("driver: rewrite named arguments: %v", err))
	}
	q := positionalSQL{sql: out, names: make([]string, len(args))}
	for i, a := range args {
		name, ok := a.(string)
		if !ok {
			panic(fmt.Sprintf("driver: named argument $%d not found in the statement's text", i+1))
		}
		q.names[i] = name
	}
	return q
}

// namedArg matches what may be a named argument, @name; pgx's own rewrite
// decides which are (a match in a comment or a string is not), so a
// superfluous match is harmless.
var namedArg = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)

// args returns the statement's positional arguments from values, by name.
// A name without a value is an error: the statement would run with NULL.
func (q positionalSQL) args(values pgx.NamedArgs) ([]any, error) {
	args := make([]any, len(q.names))
	for i, name := range q.names {
		v, ok := values[name]
		if !ok {
			return nil, fmt.Errorf("no value for the statement's argument @%s", name)
		}
		args[i] = v
	}
	return args, nil
}
