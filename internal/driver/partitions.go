package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	partitionTablesSQL       = load("partition_tables.sql")
	partitionListSQL         = load("partition_list.sql")
	partitionCreateSQL       = load("partition_create.sql")
	partitionSwitchSQL       = load("partition_switch.sql")
	partitionCarrySQL        = load("partition_carry.sql")
	partitionRetirableSQL    = load("partition_retirable.sql")
	partitionPrepareSQL      = load("partition_prepare.sql")
	partitionUniqueBuildsSQL = load("partition_unique_builds.sql")
	partitionSwapSQL         = load("partition_swap.sql")
	partitionRevertBuildsSQL = load("partition_revert_builds.sql")
	partitionUnswapSQL       = load("partition_unswap.sql")
	partitionRevertingSQL    = load("partition_reverting.sql")
	partitionAnalyzeDueSQL   = load("partition_analyze_due.sql")
)

// AnalyzeIfDue analyzes partition name when sql/partition_analyze_due.sql
// says it is due, and reports whether it did.
func AnalyzeIfDue(ctx context.Context, db DB, name string) (bool, error) {
	var due bool
	if err := db.QueryRow(ctx, partitionAnalyzeDueSQL, pgx.NamedArgs{"part": name}).Scan(&due); err != nil || !due {
		return false, err
	}
	if _, err := db.Exec(ctx, "ANALYZE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return false, fmt.Errorf("analyze %s: %w", name, err)
	}
	return true, nil
}

// PartitionedTable is one partitioned table (inbox or outbox) as
// sql/partition_tables.sql reads it.
type PartitionedTable struct {
	// Table is inbox or outbox.
	Table string
	// Span is how long a generation stays current.
	Span time.Duration
	// SwitchedAt is when the current generation became current.
	SwitchedAt time.Time
	// Reverting is set by a revert: no more switches.
	Reverting bool
	// Current is the current generation.
	Current int64
	// Now is the database's clock at the read.
	Now time.Time
}

// PartitionedTables returns the partitioned tables; none when neither is
// partitioned (or migration 019 is not applied).
func PartitionedTables(ctx context.Context, db DB) ([]PartitionedTable, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('inboxd_partitioned') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := db.Query(ctx, partitionTablesSQL)
	if err != nil {
		return nil, fmt.Errorf("read partitioned tables: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PartitionedTable, error) {
		var t PartitionedTable
		var span float64
		var cur *int64
		err := r.Scan(&t.Table, &span, &t.SwitchedAt, &t.Reverting, &cur, &t.Now)
		t.Span = time.Duration(span * float64(time.Second))
		if cur != nil {
			t.Current = *cur
		}
		return t, err
	})
}

// Partition is one partition of a partitioned table.
type Partition struct {
	// Gen is its generation.
	Gen int64
	// Name is its table's name.
	Name string
	// Rows is the planner's estimate of its rows.
	Rows int64
	// DetachPending says a DETACH ... CONCURRENTLY of it did not finish.
	DetachPending bool
}

// Partitions lists the partitions of table, oldest generation first.
func Partitions(ctx context.Context, db DB, table string) ([]Partition, error) {
	rows, err := db.Query(ctx, partitionListSQL, pgx.NamedArgs{"tbl": table})
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", table, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Partition, error) {
		var p Partition
		return p, r.Scan(&p.Gen, &p.Name, &p.Rows, &p.DetachPending)
	})
}

// CreatePartition creates and attaches the partition of gen of table
// (sql/partition_create.sql); false when it existed.
func CreatePartition(ctx context.Context, db DB, table string, gen int64) (bool, error) {
	var created bool
	err := db.QueryRow(ctx, partitionCreateSQL, pgx.NamedArgs{"tbl": table, "gen": gen}).Scan(&created)
	if err != nil {
		return false, fmt.Errorf("create partition %s_p%d: %w", table, gen, err)
	}
	return created, nil
}

// SwitchPartition makes gen the current generation of table, in a
// transaction of its own that waits at most wait for the inserts in
// flight (sql/partition_switch.sql); an error when it timed out.
func SwitchPartition(ctx context.Context, db Beginner, table string, gen int64, wait time.Duration) error {
	return inTx(ctx, db, wait, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, partitionSwitchSQL, pgx.NamedArgs{"tbl": table, "gen": gen})
		return err
	})
}

// CarryPartition moves one batch of at most batch rows of partition gen
// of table that a drop must not reach into the current partition (with
// all: every row but those claimed or reserved), and returns how many it
// moved (sql/partition_carry.sql).
func CarryPartition(ctx context.Context, db DB, table string, gen int64, all bool, batch int) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, partitionCarrySQL, pgx.NamedArgs{"tbl": table, "gen": gen, "all": all, "batch": batch}).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("carry rows of %s_p%d forward: %w", table, gen, err)
	}
	return n, nil
}

// PartitionRetirable reports whether every row of partition gen of table
// may go (sql/partition_retirable.sql).
func PartitionRetirable(ctx context.Context, db DB, table string, gen int64, retention time.Duration) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, partitionRetirableSQL, pgx.NamedArgs{"tbl": table, "gen": gen, "retention_ms": retention.Milliseconds()}).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check partition %s_p%d: %w", table, gen, err)
	}
	return ok, nil
}

// DetachPartition detaches partition name of table CONCURRENTLY (inserts,
// claims and completions go on; it waits for the transactions that may
// see it), or finalizes a detach left pending. It must run outside a
// transaction.
func DetachPartition(ctx context.Context, db DB, table, name string, pending bool) error {
	how := "CONCURRENTLY"
	if pending {
		how = "FINALIZE"
	}
	_, err := db.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s %s",
		pgx.Identifier{table}.Sanitize(), pgx.Identifier{name}.Sanitize(), how))
	if err != nil {
		return fmt.Errorf("detach %s: %w", name, err)
	}
	return nil
}

// AttachPartition attaches a detached partition name of gen back to table
// (its CHECK constraint spares the scan).
func AttachPartition(ctx context.Context, db DB, table, name string, gen int64) error {
	_, err := db.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)",
		pgx.Identifier{table}.Sanitize(), pgx.Identifier{name}.Sanitize(), gen, gen+1))
	if err != nil {
		return fmt.Errorf("attach %s back: %w", name, err)
	}
	return nil
}

// DropDetached drops a detached partition's table.
func DropDetached(ctx context.Context, db DB, name string) error {
	if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

// PreparePartitioning runs the conversion's first step on table
// (sql/partition_prepare.sql) in a transaction that waits at most wait
// for its lock.
func PreparePartitioning(ctx context.Context, db Beginner, table string, wait time.Duration) error {
	return inTx(ctx, db, wait, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, partitionPrepareSQL, pgx.NamedArgs{"tbl": table})
		return err
	})
}

// ValidatePartitionZero validates the constraint of the conversion's
// first step (a scan of the table under SHARE UPDATE EXCLUSIVE: writes go
// on).
func ValidatePartitionZero(ctx context.Context, db DB, table string) error {
	_, err := db.Exec(ctx, fmt.Sprintf("ALTER TABLE %s VALIDATE CONSTRAINT %s",
		pgx.Identifier{table}.Sanitize(), pgx.Identifier{table + "_p0_gen"}.Sanitize()))
	if err != nil {
		return fmt.Errorf("validate %s_p0_gen: %w", table, err)
	}
	return nil
}

// UniqueBuilds returns the conversion's CREATE UNIQUE INDEX CONCURRENTLY
// statements for table (sql/partition_unique_builds.sql), or with revert
// the revert's for the surviving partition gen
// (sql/partition_revert_builds.sql).
func UniqueBuilds(ctx context.Context, db DB, table string, revert bool, gen int64) ([]string, error) {
	q, args := partitionUniqueBuildsSQL, pgx.NamedArgs{"tbl": table}
	if revert {
		q, args = partitionRevertBuildsSQL, pgx.NamedArgs{"tbl": table, "gen": gen}
	}
	rows, err := db.Query(ctx, q, args)
	if err != nil {
		return nil, fmt.Errorf("unique indexes of %s: %w", table, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// SwapPartitioned runs the conversion's last step on table
// (sql/partition_swap.sql), waiting at most wait for its lock.
func SwapPartitioned(ctx context.Context, db Beginner, table string, span, wait time.Duration) error {
	return inTx(ctx, db, wait, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, partitionSwapSQL, pgx.NamedArgs{"tbl": table, "span_ms": span.Milliseconds()})
		return err
	})
}

// MarkReverting stops the switches of table (sql/partition_reverting.sql).
func MarkReverting(ctx context.Context, db DB, table string) error {
	_, err := db.Exec(ctx, partitionRevertingSQL, pgx.NamedArgs{"tbl": table})
	return err
}

// SwapUnpartitioned runs the revert's last step on table: partition gen
// becomes the table (sql/partition_unswap.sql), waiting at most wait for
// its lock.
func SwapUnpartitioned(ctx context.Context, db Beginner, table string, gen int64, wait time.Duration) error {
	return inTx(ctx, db, wait, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, partitionUnswapSQL, pgx.NamedArgs{"tbl": table, "gen": gen})
		return err
	})
}

// Beginner starts transactions: a *pgxpool.Pool or a *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// inTx runs f in a transaction whose lock waits last at most wait.
func inTx(ctx context.Context, db Beginner, wait time.Duration, f func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(wait.Milliseconds(), 1))); err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
