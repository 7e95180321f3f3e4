package riverjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/inboxd/inboxd/handlers"
)

// Config customises an Inserter. The zero Config is ready to use.
type Config struct {
	// Logger receives the River client's logs; nil discards them (an
	// insert-only client has little to say, and its errors are returned).
	Logger *slog.Logger
}

// Inserter is a handlers.JobInserter backed by an insert-only River client:
// it inserts jobs and never works them (River workers run elsewhere, on
// the same database). It is safe for concurrent use.
type Inserter struct {
	client *river.Client[pgx.Tx]
}

var _ handlers.JobInserter = (*Inserter)(nil)

// New returns an Inserter whose River client runs on pool. Jobs are
// inserted in the transaction InsertJob is given, so pool is used only for
// what River does outside one; the daemon passes its engine pool. New does
// not reach the database.
func New(pool *pgxpool.Pool, cfg Config) (*Inserter, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// No Queues and no Workers: an insert-only client, which accepts any
	// kind.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return &Inserter{client: client}, nil
}

// InsertJob inserts job for ev in tx, with River's InsertTx: kind, queue,
// priority and max attempts from job (zero values take River's defaults)
// and ev as EventArgs. A job that CheckJob refuses is a permanent error
// (retrying cannot fix a route); an insert that fails because River's
// tables are missing says to run `inboxd migrate --river`.
func (i *Inserter) InsertJob(ctx context.Context, tx pgx.Tx, job handlers.Job, ev *handlers.Event) error {
	if err := CheckJob(job); err != nil {
		return handlers.Permanent(fmt.Errorf("river job: %w", err))
	}
	args := jobArgs{kind: job.Kind, EventArgs: NewEventArgs(ev)}
	opts := &river.InsertOpts{Queue: job.Queue, Priority: job.Priority, MaxAttempts: job.MaxAttempts}
	if _, err := i.client.InsertTx(ctx, tx, args, opts); err != nil {
		if schemaError(err) {
			return fmt.Errorf("insert river job (River's schema is missing or out of date: run `inboxd migrate --river`): %w", err)
		}
		return fmt.Errorf("insert river job: %w", err)
	}
	return nil
}

// InsertJobs inserts job for every event of evs in tx with one River
// InsertManyTx, as InsertJob does for one: a river route with batch:
// calls it for each batch.
func (i *Inserter) InsertJobs(ctx context.Context, tx pgx.Tx, job handlers.Job, evs []*handlers.Event) error {
	if err := CheckJob(job); err != nil {
		return handlers.Permanent(fmt.Errorf("river job: %w", err))
	}
	opts := &river.InsertOpts{Queue: job.Queue, Priority: job.Priority, MaxAttempts: job.MaxAttempts}
	params := make([]river.InsertManyParams, len(evs))
	for n, ev := range evs {
		params[n] = river.InsertManyParams{Args: jobArgs{kind: job.Kind, EventArgs: NewEventArgs(ev)}, InsertOpts: opts}
	}
	if _, err := i.client.InsertManyTx(ctx, tx, params); err != nil {
		if schemaError(err) {
			return fmt.Errorf("insert river jobs (River's schema is missing or out of date: run `inboxd migrate --river`): %w", err)
		}
		return fmt.Errorf("insert river jobs: %w", err)
	}
	return nil
}

// schemaError reports whether err is PostgreSQL saying that a table,
// column, type or function River needs does not exist.
func schemaError(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42P01", "42703", "42704", "42883": // undefined table, column, object, function
		return true
	}
	return false
}

// River's naming rules, as River v0.51 applies them: queue names when a job
// is inserted, kinds when a worker is registered (so a kind outside them
// could be enqueued but never worked by a River worker that validates).
var (
	queueRE = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)
	kindRE  = regexp.MustCompile(`\A[\w][\w\-\[\]<>\/.·:+]+\z`)
)

// maxQueueLen is the longest queue name River accepts.
const maxQueueLen = 64

// maxMaxAttempts is the most attempts a River job can have
// (river_job.max_attempts is a smallint).
const maxMaxAttempts = 32767

// CheckJob reports whether River can take job: a kind that follows River's
// rules (a word character, then at least one more of word characters and
// - [ ] < > / . · : +), a queue name that is empty or lowercase letters and
// digits separated by single _, - or |, at most 64 long, a priority of 0 or 1
// to 4, and max attempts of 0 or 1 to 32767. Each error names its field
// as the routes file does (kind, queue, priority, max_attempts), one per
// line.
func CheckJob(job handlers.Job) error {
	var errs []error
	if !kindRE.MatchString(job.Kind) {
		errs = append(errs, fmt.Errorf("kind: %q is not a River job kind (a letter, digit or _, then at least one more of these or - [ ] < > / . · : +)", job.Kind))
	}
	switch {
	case job.Queue == "":
	case len(job.Queue) > maxQueueLen:
		errs = append(errs, fmt.Errorf("queue: River queue names are at most %d characters, got %d", maxQueueLen, len(job.Queue)))
	case !queueRE.MatchString(job.Queue):
		errs = append(errs, fmt.Errorf("queue: %q is not a River queue name (lowercase letters and digits, separated by single _, - or |)", job.Queue))
	}
	if job.Priority < 0 || job.Priority > 4 {
		errs = append(errs, fmt.Errorf("priority: must be between 1 and 4, got %d", job.Priority))
	}
	if job.MaxAttempts < 0 || job.MaxAttempts > maxMaxAttempts {
		errs = append(errs, fmt.Errorf("max_attempts: River jobs take between 1 and %d attempts, got %d", maxMaxAttempts, job.MaxAttempts))
	}
	return errors.Join(errs...)
}
