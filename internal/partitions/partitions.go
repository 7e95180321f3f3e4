// Package partitions runs the partitioned shape of the inbox and outbox
// tables (docs/inbox-table.md, "Partitioned tables"; the SQL is migration
// 019's): the online conversion of a live table and its revert, and the
// maintenance that retention runs instead of deleting rows: partitions
// created ahead, generations switched every span, the rows a drop must
// not reach carried forward, and partitions whose every row may go
// detached and dropped.
package partitions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/driver"
)

// Tables are the tables that may be partitioned, in conversion order.
var Tables = []string{"inbox", "outbox"}

// LockWait bounds each wait of a switch, a conversion's or a revert's
// short exclusive step for its lock: the inserts (and, for the steps under
// ACCESS EXCLUSIVE, every statement on the table) queued behind a waiting
// lock request wait no longer than this; a step that timed out is tried
// again.
const LockWait = 200 * time.Millisecond

// carryBatch is how many rows one carrying statement moves.
const carryBatch = 5000

// Round is what one maintenance round did on one table.
type Round struct {
	// Switched is the generation made current (0: none).
	Switched int64
	// Created counts the partitions created ahead.
	Created int
	// Carried counts the rows carried forward.
	Carried int64
	// Retired names the partitions detached and dropped.
	Retired []string
}

// Partitioned reports whether table is partitioned, and its state.
func Partitioned(ctx context.Context, db driver.DB, table string) (driver.PartitionedTable, bool, error) {
	ts, err := driver.PartitionedTables(ctx, db)
	if err != nil {
		return driver.PartitionedTable{}, false, err
	}
	i := slices.IndexFunc(ts, func(t driver.PartitionedTable) bool { return t.Table == table })
	if i < 0 {
		return driver.PartitionedTable{}, false, nil
	}
	return ts[i], true, nil
}

// Maintain runs one maintenance round on table if it is partitioned (ok
// false if not): the next generation is made current once the current one
// has been for its span, one partition is kept ready ahead, and each older
// partition has its rows that must stay carried forward and is retired
// (detached, dropped) once every row in it is finished and older than
// retention.
func Maintain(ctx context.Context, db *pgxpool.Pool, table string, retention time.Duration, log zerolog.Logger) (Round, bool, error) {
	var r Round
	st, ok, err := Partitioned(ctx, db, table)
	if err != nil || !ok {
		return r, false, err
	}
	parts, err := driver.Partitions(ctx, db, table)
	if err != nil {
		return r, true, err
	}
	for _, p := range parts {
		if p.DetachPending {
			if err := retire(ctx, db, table, p, retention, true, &r); err != nil {
				return r, true, err
			}
		}
	}
	if !st.Reverting {
		switched := false
		if st.Now.Sub(st.SwitchedAt) >= st.Span {
			next := st.Current + 1
			created, err := driver.CreatePartition(ctx, db, table, next)
			switch {
			case err != nil:
				return r, true, err
			case created:
				// Made only now: a statement whose plan started before the
				// attach could not route rows into it. The next round
				// switches.
				r.Created++
			default:
				err := driver.SwitchPartition(ctx, db, table, next, LockWait)
				switch {
				case err == nil:
					r.Switched, switched = next, true
					st.Current = next
				case lockTimeout(err):
					log.Info().Str("table", table).Msg("partition switch waited too long for the inserts in flight; the next round tries again")
				default:
					return r, true, fmt.Errorf("switch %s to generation %d: %w", table, next, err)
				}
			}
		}
		// The next partition is made ahead, once three quarters of the
		// span have passed: an empty partition costs every statement that
		// does not prune it an index probe, so it is not kept longer.
		if st.Now.Sub(st.SwitchedAt) >= st.Span*3/4 || switched {
			created, err := driver.CreatePartition(ctx, db, table, st.Current+1)
			if err != nil {
				return r, true, err
			}
			if created {
				r.Created++
			}
		}
	}
	if _, err := driver.AnalyzeIfDue(ctx, db, fmt.Sprintf("%s_p%d", table, st.Current)); err != nil {
		return r, true, err
	}
	for _, p := range parts {
		if p.Gen >= st.Current || p.DetachPending {
			continue
		}
		if !st.Reverting {
			for {
				n, err := driver.CarryPartition(ctx, db, table, p.Gen, false, carryBatch)
				if err != nil {
					return r, true, err
				}
				r.Carried += n
				if n < carryBatch {
					break
				}
			}
		}
		ok, err := driver.PartitionRetirable(ctx, db, table, p.Gen, retention)
		if err != nil {
			return r, true, err
		}
		if ok {
			if err := retire(ctx, db, table, p, retention, false, &r); err != nil {
				return r, true, err
			}
		}
	}
	return r, true, nil
}

// retire detaches partition p CONCURRENTLY (or finalizes its pending
// detach), checks again that every row in it may go (a row requeued
// between the check and the detach would otherwise go with it), and drops
// it, or attaches it back.
func retire(ctx context.Context, db *pgxpool.Pool, table string, p driver.Partition, retention time.Duration, pending bool, r *Round) error {
	if err := driver.DetachPartition(ctx, db, table, p.Name, pending); err != nil {
		return err
	}
	ok, err := driver.PartitionRetirable(ctx, db, table, p.Gen, retention)
	if err != nil {
		return err
	}
	if !ok {
		return driver.AttachPartition(ctx, db, table, p.Name, p.Gen)
	}
	if err := driver.DropDetached(ctx, db, p.Name); err != nil {
		return err
	}
	r.Retired = append(r.Retired, p.Name)
	return nil
}

// lockTimeout reports whether err is a lock_timeout (SQLSTATE 55P03).
func lockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// retryLocked runs step until it does not time out on its lock, pausing
// between tries; at most tries times.
func retryLocked(ctx context.Context, tries int, step func() error) error {
	var err error
	for i := 0; i < tries; i++ {
		if err = step(); err == nil || !lockTimeout(err) {
			return err
		}
		if !backoff.Sleep(ctx, time.Duration(100+50*i)*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("gave up after %d tries: %w", tries, err)
}

// lockTries is how often a conversion's or revert's locked step is tried.
const lockTries = 100

// Convert turns table, live, into the partitioned shape whose generations
// last span: the partition key (a short lock), its constraint validated
// and the unique indexes' twins built without a lock that stops writes,
// then one short transaction under ACCESS EXCLUSIVE (catalogue work only)
// that makes the table partition 0. Every step is safe to run again; a
// converted table is left as it is.
func Convert(ctx context.Context, db *pgxpool.Pool, table string, span time.Duration, log zerolog.Logger) error {
	if _, ok, err := Partitioned(ctx, db, table); err != nil || ok {
		return err
	}
	log = log.With().Str("table", table).Logger()
	if err := retryLocked(ctx, lockTries, func() error { return driver.PreparePartitioning(ctx, db, table, LockWait) }); err != nil {
		return fmt.Errorf("convert %s: partition key: %w", table, err)
	}
	start := time.Now()
	if err := untimed(ctx, db, func(c driver.DB) error { return driver.ValidatePartitionZero(ctx, c, table) }); err != nil {
		return fmt.Errorf("convert %s: %w", table, err)
	}
	log.Info().Dur("took", time.Since(start).Round(time.Millisecond)).Msg("partition 0's constraint validated")
	builds, err := driver.UniqueBuilds(ctx, db, table, false, 0)
	if err != nil {
		return fmt.Errorf("convert %s: %w", table, err)
	}
	for _, b := range builds {
		start := time.Now()
		if err := untimed(ctx, db, func(c driver.DB) error { _, err := c.Exec(ctx, b); return err }); err != nil {
			return fmt.Errorf("convert %s: %s: %w", table, b, err)
		}
		log.Info().Str("statement", b).Dur("took", time.Since(start).Round(time.Millisecond)).Msg("unique index built")
	}
	if err := retryLocked(ctx, lockTries, func() error { return driver.SwapPartitioned(ctx, db, table, span, LockWait) }); err != nil {
		return fmt.Errorf("convert %s: swap: %w", table, err)
	}
	log.Info().Msg("converted: the table is partition 0 of the partitioned table")
	return nil
}

// Revert turns partitioned table back into one table: switches stop, the
// partition with the most rows becomes current, every other partition's
// rows are carried into it (rows claimed or reserved are waited for),
// the unique indexes of before are built on it without a lock that stops
// writes, and one short transaction under ACCESS EXCLUSIVE makes it the
// table. poll is how often it looks again at rows it waits for.
func Revert(ctx context.Context, db *pgxpool.Pool, table string, poll time.Duration, log zerolog.Logger) error {
	st, ok, err := Partitioned(ctx, db, table)
	if err != nil || !ok {
		return err
	}
	log = log.With().Str("table", table).Logger()
	if err := driver.MarkReverting(ctx, db, table); err != nil {
		return fmt.Errorf("revert %s: %w", table, err)
	}
	parts, err := driver.Partitions(ctx, db, table)
	if err != nil {
		return err
	}
	survivor := st.Current
	var most int64 = -1
	for _, p := range parts {
		if p.Rows > most {
			survivor, most = p.Gen, p.Rows
		}
	}
	if survivor != st.Current {
		if err := retryLocked(ctx, lockTries, func() error { return driver.SwitchPartition(ctx, db, table, survivor, LockWait) }); err != nil {
			return fmt.Errorf("revert %s: switch to %d: %w", table, survivor, err)
		}
	}
	log.Info().Int64("survivor", survivor).Msg("reverting: carrying every row into the surviving partition")
	for {
		left := 0
		parts, err := driver.Partitions(ctx, db, table)
		if err != nil {
			return err
		}
		for _, p := range parts {
			if p.Gen == survivor {
				continue
			}
			for {
				n, err := driver.CarryPartition(ctx, db, table, p.Gen, true, carryBatch)
				if err != nil {
					return err
				}
				if n < carryBatch {
					break
				}
			}
			var any bool
			if err := db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+quote(p.Name)+")").Scan(&any); err != nil {
				return err
			}
			if any {
				left++
			}
		}
		if left == 0 {
			break
		}
		log.Info().Int("partitions", left).Msg("reverting: waiting for claimed rows to finish")
		if !backoff.Sleep(ctx, poll) {
			return ctx.Err()
		}
	}
	builds, err := driver.UniqueBuilds(ctx, db, table, true, survivor)
	if err != nil {
		return fmt.Errorf("revert %s: %w", table, err)
	}
	for _, b := range builds {
		if err := untimed(ctx, db, func(c driver.DB) error { _, err := c.Exec(ctx, b); return err }); err != nil {
			return fmt.Errorf("revert %s: %s: %w", table, b, err)
		}
	}
	if err := retryLocked(ctx, lockTries, func() error { return driver.SwapUnpartitioned(ctx, db, table, survivor, LockWait) }); err != nil {
		return fmt.Errorf("revert %s: swap: %w", table, err)
	}
	log.Info().Msg("reverted: the table is one table again")
	return nil
}

// untimed runs f on a connection of db without a statement timeout: a
// validation's scan or an index build on millions of rows takes longer
// than INBOXD_STATEMENT_TIMEOUT, and holds no lock that stops writes.
func untimed(ctx context.Context, db *pgxpool.Pool, f func(driver.DB) error) error {
	c, err := db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	if _, err := c.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		return err
	}
	err = f(c)
	if _, rerr := c.Exec(context.WithoutCancel(ctx), "RESET statement_timeout"); rerr != nil {
		c.Conn().Close(ctx) //nolint:errcheck // not back to the pool with its timeout off
	}
	return err
}

func quote(name string) string { return `"` + name + `"` }
