package app

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/worker"
)

// runPrune runs one retention pass now, as every replica's retention loop
// does each INBOXD_RETENTION_INTERVAL, and says how many rows it deleted (or
// would delete, with dryRun). Dead rows that hold their key back are kept,
// as the daemon's retention keeps them: with INBOXD_DEAD_RETENTION set, the
// routes (opts' Go handlers and INBOXD_ROUTES) say which routes block.
func runPrune(ctx context.Context, cfg config.Config, opts Options, stdout, stderr io.Writer, dryRun bool) error {
	conn, err := connectSchema(ctx, cfg) // checks the schema before anything is deleted
	if err != nil {
		return err
	}
	conn.Close(context.WithoutCancel(ctx))

	pc, err := cfg.PoolConfig("inboxd-cli", 1)
	if err != nil {
		return usageError{err}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("prune: connect to %s: %w", cfg.Redacted(), err)
	}
	defer pool.Close()
	log := newLogger(cfg, stderr)
	rcfg := worker.RetentionConfig{
		Processed:        cfg.Retention,
		Failed:           cfg.DeadRetention,
		StatementTimeout: cfg.StatementTimeout,
	}
	if cfg.DeadRetention > 0 {
		reg, err := registryBuilder{cfg: cfg, opts: opts, db: pool, log: log}.build(ctx)
		if err != nil {
			return usageError{fmt.Errorf("prune: the routes say which dead rows block their key: %w", err)}
		}
		blocking := maintenance.RegistryBlockingTypes(reg)
		rcfg.BlockingTypes = func() []string { return blocking }
	}
	r, err := maintenance.NewRetention(pool, rcfg, log, nil)
	if err != nil {
		return usageError{fmt.Errorf("prune: %w", err)}
	}
	res, err := r.Prune(ctx, dryRun)
	verb := "pruned"
	if dryRun {
		verb = "would prune"
	}
	failed := fmt.Sprintf("%s (failed more than %s ago, INBOXD_DEAD_RETENTION)", plural(res.Failed, "dead/rejected row"), cfg.DeadRetention)
	if cfg.DeadRetention == 0 {
		failed = "no dead or rejected rows (kept: INBOXD_DEAD_RETENTION is 0)"
	}
	fmt.Fprintf(stdout, "%s %s (processed more than %s ago, INBOXD_RETENTION) and %s\n",
		verb, plural(res.Processed, "processed row"), cfg.Retention, failed)
	if err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	return nil
}
