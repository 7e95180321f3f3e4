package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/partitions"
)

// partitionCommands are `inboxd partitions convert|revert|status`: the
// partitioned shape of the inbox and outbox (docs/inbox-table.md,
// "Partitioned tables").
func partitionCommands() []command {
	return []command{
		{name: "partitions convert", summary: "turn the live inbox and outbox into tables partitioned by generation (online: no pause over a second); retention then drops whole partitions",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				span := fs.Duration("span", time.Hour, "how long each generation is current (`DURATION`; a partition holds about this much ingest)")
				return func(cfg config.Config) error { return runPartitions(a.ctx, cfg, a.stdout, a.stderr, "convert", *span) }
			}},
		{name: "partitions revert", summary: "turn the partitioned inbox and outbox back into one table each (online; waits for claimed rows)",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				return func(cfg config.Config) error { return runPartitions(a.ctx, cfg, a.stdout, a.stderr, "revert", 0) }
			}},
		{name: "partitions status", summary: "print the partitions of the inbox and outbox",
			setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
				return func(cfg config.Config) error { return runPartitions(a.ctx, cfg, a.stdout, a.stderr, "status", 0) }
			}},
	}
}

// runPartitions runs one of the partitions commands on both tables.
func runPartitions(ctx context.Context, cfg config.Config, stdout, stderr io.Writer, what string, span time.Duration) error {
	conn, err := connectSchema(ctx, cfg) // the schema must know the partition functions (migration 019)
	if err != nil {
		return err
	}
	conn.Close(context.WithoutCancel(ctx))
	pc, err := cfg.PoolConfig("inboxd-cli", 2)
	if err != nil {
		return usageError{err}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("partitions: connect to %s: %w", cfg.Redacted(), err)
	}
	defer pool.Close()
	log := newLogger(cfg, stderr)
	for _, t := range partitions.Tables {
		switch what {
		case "convert":
			if span < time.Second {
				return usageError{fmt.Errorf("partitions convert: --span must be at least 1s")}
			}
			if err := partitions.Convert(ctx, pool, t, span, log); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: partitioned (generations of %s)\n", t, span)
		case "revert":
			if err := partitions.Revert(ctx, pool, t, time.Second, log); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: one table\n", t)
		default:
			st, ok, err := partitions.Partitioned(ctx, pool, t)
			if err != nil {
				return err
			}
			if !ok {
				fmt.Fprintf(stdout, "%s: not partitioned\n", t)
				continue
			}
			fmt.Fprintf(stdout, "%s: partitioned, generation %d current since %s (span %s)%s\n", t, st.Current,
				st.SwitchedAt.UTC().Format(time.RFC3339), st.Span, map[bool]string{true: ", reverting"}[st.Reverting])
			parts, err := driver.Partitions(ctx, pool, t)
			if err != nil {
				return err
			}
			for _, p := range parts {
				fmt.Fprintf(stdout, "  %-12s generation %-6d ~%d rows%s\n", p.Name, p.Gen, p.Rows, map[bool]string{true: " (detach pending)"}[p.DetachPending])
			}
		}
	}
	return nil
}
