// Command inboxd consumes Kafka into a PostgreSQL inbox table and processes
// the rows with a pool of workers. Run "inboxd help" for the subcommands and
// see docs/configuration.md for the configuration.
package main

import (
	"context"
	"os"

	"github.com/inboxd/inboxd/cmd/inboxd/app"
)

func main() {
	ctx, stop := app.SignalContext(context.Background(), os.Stderr)
	code := app.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, app.Options{})
	stop()
	os.Exit(code)
}
