package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/inboxd/inboxd/config"
)

// Version is the release version, set at build time with
// -ldflags "-X github.com/inboxd/inboxd/cmd/inboxd/app.Version=v1.2.3".
var Version = "dev"

// Exit codes returned by Main.
const (
	// ExitOK means the command succeeded (including a clean shutdown on
	// SIGTERM or SIGINT).
	ExitOK = 0
	// ExitFailure means the command failed at run time.
	ExitFailure = 1
	// ExitUsage means bad arguments or configuration.
	ExitUsage = 2
)

// usageError marks errors that should exit with ExitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

const usage = `usage: inboxd <command> [flags]

commands:
  run [--migrate]          run the daemon (ingest when INBOXD_KAFKA_BROKERS is set, and workers)
  migrate                  apply pending schema migrations (safe to run from several replicas)
  stats [--json]           row counts by status, oldest due row, schema version
  dead [flags]             list dead (or rejected) rows: --status, --type, --limit, --json
  requeue [flags]          return dead rows to received: --id 1,2,3 | --type T | --all
  version                  print the version

Configuration is read from INBOXD_* environment variables; see README.md.
`

// Main runs the inboxd command line with args (without the program name)
// and the environment environ, and returns the process exit code. Command
// output goes to stdout; logs and errors go to stderr.
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer, opts Options) int {
	err := dispatch(ctx, args, environ, stdout, stderr, opts)
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, new(usageError)):
		printError(stderr, err)
		return ExitUsage
	default:
		printError(stderr, err)
		return ExitFailure
	}
}

// printError writes err one line per problem, each prefixed, so every bad
// setting gets a line of its own that names it.
func printError(w io.Writer, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(w, "inboxd: %s\n", line)
	}
}

func dispatch(ctx context.Context, args, environ []string, stdout, stderr io.Writer, opts Options) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{errors.New("no command given")}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version", "--version":
		fmt.Fprintln(stdout, "inboxd", versionString())
		return nil
	}

	fs := flag.NewFlagSet("inboxd "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var run func(cfg config.Config) error
	switch cmd {
	case "run":
		migrate := fs.Bool("migrate", false, "apply pending migrations before starting")
		run = func(cfg config.Config) error { return runDaemon(ctx, cfg, opts, stderr, *migrate) }
	case "migrate":
		run = func(cfg config.Config) error { return runMigrate(ctx, cfg, stdout, stderr) }
	case "stats":
		asJSON := fs.Bool("json", false, "print JSON")
		run = func(cfg config.Config) error { return runStats(ctx, cfg, stdout, *asJSON) }
	case "dead":
		var f listFlags
		fs.StringVar(&f.status, "status", "dead", "dead or rejected")
		fs.StringVar(&f.eventType, "type", "", "only this event type")
		fs.IntVar(&f.limit, "limit", 50, "at most this many rows")
		fs.BoolVar(&f.json, "json", false, "print JSON lines")
		run = func(cfg config.Config) error { return runList(ctx, cfg, stdout, f) }
	case "requeue":
		var f requeueFlags
		fs.StringVar(&f.ids, "id", "", "comma-separated row ids")
		fs.StringVar(&f.eventType, "type", "", "every dead row of this event type")
		fs.BoolVar(&f.all, "all", false, "every dead row")
		run = func(cfg config.Config) error { return runRequeue(ctx, cfg, stdout, f) }
	default:
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Errorf("unknown command %q", cmd)}
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("%s: unexpected arguments %q", cmd, strings.Join(fs.Args(), " "))}
	}
	cfg, err := config.Load(environ)
	if err != nil {
		return usageError{err}
	}
	return run(cfg)
}

func versionString() string {
	v := Version
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return v
}
