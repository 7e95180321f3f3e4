package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/vardocs"
)

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

// command is one subcommand of inboxd. The table of commands drives both
// the dispatch and the help text, so the help cannot miss a flag.
type command struct {
	// name is what the user types.
	name string
	// args names the positional arguments in the usage line ("" = none).
	args string
	// summary says in one line what the command does.
	summary string
	// noConfig commands run without loading the configuration.
	noConfig bool
	// setup registers the command's flags on fs and returns the function
	// that runs it once the flags, the positional arguments (in a.args) and
	// the configuration are parsed.
	setup func(fs *flag.FlagSet, a *invocation) func(cfg config.Config) error
}

// invocation is what a command runs with.
type invocation struct {
	ctx            context.Context
	stdout, stderr io.Writer
	opts           Options
	// args are the positional arguments.
	args []string
	// environ is the command's environment (route pause: $USER).
	environ []string
}

// commands lists every subcommand in the order help shows them.
var commands []command

func init() {
	commands = []command{
		{name: "run", summary: "run the daemon: ingest (from each source configured: Kafka, RabbitMQ, NATS), workers, retention, /metrics, /healthz, /readyz, the console (/ui/)",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				migrate := fs.Bool("migrate", false, "apply pending migrations before starting")
				ctx, opts, stderr := a.ctx, a.opts, a.stderr
				return func(cfg config.Config) error { return runDaemon(ctx, cfg, opts, stderr, *migrate) }
			}},
		{name: "migrate", summary: "apply pending schema migrations under an advisory lock (as INBOXD_MIGRATE_DATABASE_URL's role when set)",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				river := fs.Bool("river", false, "also apply River's migrations (its job tables, which handler: river routes need)")
				return func(cfg config.Config) error { return runMigrate(a.ctx, cfg, a.stdout, a.stderr, *river) }
			}},
		{name: "stats", summary: "rows by live status, stale rows, oldest received and due rows, schema version",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				asJSON := jsonFlag(fs, "print one JSON object")
				return func(cfg config.Config) error { return runStats(a.ctx, cfg, a.stdout, *asJSON) }
			}},
		{name: "dead", summary: "list dead (or rejected) rows, newest first, with their last_error (inboxd list shows the other statuses)",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				var f listFlags
				fs.StringVar(&f.status, "status", string(status.Dead), "`status` of the rows listed: dead or rejected")
				f.query.register(fs)
				return func(cfg config.Config) error { return runList(a.ctx, cfg, a.stdout, a.stderr, f) }
			}},
		{name: "show", args: "ID|EVENT_ID", summary: "print one row (by id, else by event id; --source for an event id several sources hold), every column, with its headers, payload and attempts",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				var f showFlags
				jsonFlagVar(fs, &f.json, "print one JSON object (key and payload in base64)")
				fs.BoolVar(&f.full, "full", false, "print the whole payload, however long")
				fs.StringVar(&f.source, "source", "", "the `SOURCE` whose event id the argument is")
				return func(cfg config.Config) error { return runShow(a.ctx, cfg, a.stdout, a.args, f) }
			}},
		{name: "requeue", summary: "return dead (or rejected, re-mapped with the current configuration) rows to received and wake the workers",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				var f requeueFlags
				f.filter.register(fs, "requeue")
				fs.BoolVar(&f.dryRun, "dry-run", false, "list what would be requeued; change nothing")
				fs.BoolVar(&f.dropDuplicates, "drop-duplicates", false,
					"with --status rejected: delete a rejected row whose event is already in the inbox")
				return func(cfg config.Config) error { return runRequeue(a.ctx, cfg, a.stdout, a.stderr, a.environ, f) }
			}},
		{name: "discard", summary: "delete dead (or rejected) rows; logs what it deleted",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				var f discardFlags
				f.filter.register(fs, "discard")
				fs.BoolVar(&f.dryRun, "dry-run", false, "list what would be deleted; delete nothing")
				return func(cfg config.Config) error { return runDiscard(a.ctx, cfg, a.stdout, a.stderr, a.environ, f) }
			}},
		{name: "prune", summary: "run one retention pass now (INBOXD_RETENTION, INBOXD_DEAD_RETENTION)",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				dryRun := fs.Bool("dry-run", false, "count what a pass would delete; delete nothing")
				return func(cfg config.Config) error { return runPrune(a.ctx, cfg, a.opts, a.stdout, a.stderr, *dryRun) }
			}},
		{name: "help", summary: "print every command with its flags and every INBOXD_* variable", noConfig: true,
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				return func(config.Config) error { return writeHelp(a.stdout) }
			}},
		{name: "version", summary: "print the version, the commit and the date of the build", noConfig: true,
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				return func(config.Config) error {
					_, err := fmt.Fprintln(a.stdout, "inboxd", currentBuild())
					return err
				}
			}},
	}
	// The outbox's commands come before help and version.
	at := slices.IndexFunc(commands, func(c command) bool { return c.name == "help" })
	commands = slices.Insert(commands, at, outboxCommands()...)
	at = slices.IndexFunc(commands, func(c command) bool { return c.name == "help" })
	commands = slices.Insert(commands, at, routeCommands()...)
	// cancel and retry come after discard.
	at = slices.IndexFunc(commands, func(c command) bool { return c.name == "discard" })
	commands = slices.Insert(commands, at+1, liveCommands()...)
	// audit and completion come before help.
	at = slices.IndexFunc(commands, func(c command) bool { return c.name == "help" })
	commands = slices.Insert(commands, at, auditCommand(), completionCommand())
	// list comes before dead.
	at = slices.IndexFunc(commands, func(c command) bool { return c.name == "dead" })
	commands = slices.Insert(commands, at, listCommand())
	at = slices.IndexFunc(commands, func(c command) bool { return c.name == "help" })
	commands = slices.Insert(commands, at, partitionCommands()...)
	// The console comes right after run.
	commands = slices.Insert(commands, 1, uiCommand())
}

// Main runs the inboxd command line with args (without the program name)
// and the environment environ, and returns the process exit code. Command
// output goes to stdout; logs and errors go to stderr. Every command first
// warns, on stderr, about INBOXD_* variables that inboxd does not read (a
// misspelling, most likely), naming the closest known one. The daemons
// (run, ui) write every line through their logger (JSON, or text for
// people: INBOXD_LOG_FORMAT), their warnings and errors included; the
// other commands write them as lines for people, prefixed "inboxd: ".
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer, opts Options) int {
	var log *zerolog.Logger
	if len(args) > 0 && daemonCommands[args[0]] {
		l := environLogger(environ, stderr)
		if opts.Logger != nil {
			l = *opts.Logger
		}
		log = &l
	}
	for _, w := range vardocs.Warnings(environ) {
		if log != nil {
			log.Warn().Str("variable", variableOf(w)).Msg(w)
		} else {
			fmt.Fprintf(stderr, "inboxd: warning: %s\n", w)
		}
	}
	err := dispatch(ctx, args, environ, stdout, stderr, opts)
	usage := errors.As(err, new(usageError))
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case log != nil:
		logError(*log, err, usage)
	default:
		printError(stderr, err)
	}
	if usage {
		return ExitUsage
	}
	return ExitFailure
}

// daemonCommands are the commands that serve until stopped, and log.
var daemonCommands = map[string]bool{"run": true, "ui": true}

// printError writes err one line per problem, each prefixed, so every bad
// setting gets a line of its own that names it.
func printError(w io.Writer, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(w, "inboxd: %s\n", line)
	}
}

func dispatch(ctx context.Context, args, environ []string, stdout, stderr io.Writer, opts Options) error {
	if len(args) == 0 {
		writeShortUsage(stderr)
		return usageError{errors.New("no command given")}
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "--help":
		name = "help"
	case "--version":
		name = "version"
	}
	// A command of two words (outbox stats).
	if len(rest) > 0 {
		if _, ok := lookupCommand(name + " " + rest[0]); ok {
			name, rest = name+" "+rest[0], rest[1:]
		}
	}
	cmd, ok := lookupCommand(name)
	if !ok {
		writeShortUsage(stderr)
		if subs := subcommands(name); len(subs) > 0 {
			return usageError{fmt.Errorf("%s: give one of its commands: %s", name, strings.Join(subs, ", "))}
		}
		return usageError{fmt.Errorf("unknown command %q", name)}
	}
	inv := &invocation{ctx: ctx, stdout: stdout, stderr: stderr, opts: opts, environ: environ}
	fs := flag.NewFlagSet("inboxd "+cmd.name, flag.ContinueOnError)
	// The flag package's own line of a bad flag is dropped: Main prints the
	// error once (and fs.Usage the command's help).
	fs.SetOutput(io.Discard)
	run := cmd.setup(fs, inv)
	fs.Usage = func() { writeCommandHelp(stderr, cmd, fs) }
	pos, err := parseInterspersed(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if cmd.args == "" && len(pos) > 0 {
		return usageError{fmt.Errorf("%s: unexpected arguments %q", cmd.name, strings.Join(pos, " "))}
	}
	inv.args = pos
	if cmd.noConfig {
		return run(config.Config{})
	}
	if cmd.name == "migrate" {
		environ = migrateEnviron(environ)
	}
	cfg, err := config.Load(environ)
	if err != nil {
		return usageError{err}
	}
	return run(cfg)
}

// subcommands returns the second words of the commands that start with the
// word name (outbox: stats, dead, …).
func subcommands(name string) []string {
	var subs []string
	for _, c := range commands {
		if sub, ok := strings.CutPrefix(c.name, name+" "); ok {
			subs = append(subs, sub)
		}
	}
	return subs
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// isNegativeNumber says whether arg is a number below zero ("-2",
// "-0.5"), which no flag's name is.
func isNegativeNumber(arg string) bool {
	if len(arg) < 2 || arg[0] != '-' || (arg[1] < '0' || arg[1] > '9') && arg[1] != '.' {
		return false
	}
	_, err := strconv.ParseFloat(arg, 64)
	return err == nil
}

// parseInterspersed parses flags that come before, between and after the
// positional arguments (`inboxd show 42 --json`), and returns the
// positional arguments. Everything after "--" is positional, and so is a
// negative number where a flag could stand (`inboxd route rate TYPE -2`
// is refused for its rate, not as an unknown flag -2).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if len(args) > 0 && isNegativeNumber(args[0]) {
			pos = append(pos, args[0])
			args = args[1:]
			continue
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse stops at the first non-flag, or after "--".
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
