package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// WriteCost is what a throughput run wrote to its table and the table's
// indexes, per event, measured on the run's own database.
//
// An index gets an entry per row version whose values match its predicate:
// an insert makes one in every index whose predicate the new row matches,
// and a non-HOT update one in every index whose predicate the new version
// matches (a HOT update makes none; it is possible only when no indexed
// column, predicates' columns included, changes). So the entries an event
// writes are (inserts + non-HOT updates) per event, each counted in the
// indexes whose predicate that version matches: this type records the
// counts and the indexes' growth, and derives nothing it cannot measure
// (which version matched which predicate is the reader's to work out from
// the statements).
type WriteCost struct {
	// Table is the table measured (inbox for raw, pool and e2e: the
	// yardstick writes inboxd's table too).
	Table string `json:"table"`
	// Events is the run's events, the divisor of every per-event figure.
	Events int `json:"events"`
	// InsertsPerEvent, UpdatesPerEvent and HOTUpdatesPerEvent are the
	// growth of pg_stat_user_tables' n_tup_ins, n_tup_upd and n_tup_hot_upd
	// for Table over the run, per event. PostgreSQL 15's backends flush
	// these counters to shared memory at most once a second while busy,
	// and an idle one up to 10 s later (pg_stat_force_next_flush() only
	// affects the calling backend), but always when they exit, before they
	// leave pg_stat_activity: they are read once every connection to the
	// database has closed and is gone from pg_stat_activity, from a new
	// session.
	InsertsPerEvent    float64 `json:"inserts_per_event"`
	UpdatesPerEvent    float64 `json:"updates_per_event"`
	HOTUpdatesPerEvent float64 `json:"hot_updates_per_event"`
	// HOTShare is n_tup_hot_upd / n_tup_upd over the run (0 without
	// updates).
	HOTShare float64 `json:"hot_share"`
	// TableBytesPerEvent is the growth of pg_relation_size(Table) (the heap,
	// main fork) over the run, per event.
	TableBytesPerEvent float64 `json:"table_bytes_per_event"`
	// WALBytesPerEvent is pg_current_wal_lsn()'s advance over the run, per
	// event. WAL is the server's, not the database's: it counts every
	// database's writes, which during `make bench` are this run's alone
	// (the benchmark runs one measurement at a time on a server it has to
	// itself; on a shared server it is an upper bound).
	WALBytesPerEvent float64 `json:"wal_bytes_per_event"`
	// Indexes are Table's indexes, by name.
	Indexes []IndexCost `json:"indexes"`
	// LeafNote says why IndexCost.LeafTuplesPerEvent is missing, when it
	// is (pgstattuple not installable on the server).
	LeafNote string `json:"leaf_note,omitempty"`
}

// IndexCost is one index's growth over a run.
type IndexCost struct {
	// Name is the index's name.
	Name string `json:"name"`
	// Predicate is its WHERE clause (empty for a full index).
	Predicate string `json:"predicate,omitempty"`
	// BytesBefore and BytesAfter are pg_relation_size of the index before
	// and after the run (whole 8 KiB pages: it grows in steps).
	BytesBefore int64 `json:"bytes_before"`
	BytesAfter  int64 `json:"bytes_after"`
	// BytesPerEvent is (BytesAfter − BytesBefore) / events.
	BytesPerEvent float64 `json:"bytes_per_event"`
	// LeafTuplesPerEvent is the growth of the items on the index's leaf
	// pages (pgstattuple's tuple_count + dead_tuple_count) per event: the
	// net of the entries written and those removed by simple and bottom-up
	// deletion during the run, a deduplicated posting list counting once.
	// It is not the entries written; nil when pgstattuple is unavailable.
	LeafTuplesPerEvent *float64 `json:"leaf_tuples_per_event,omitempty"`
}

// relationSnapshot is the sizes (and leaf items) of a table and its
// indexes, and the server's WAL position, at one moment.
type relationSnapshot struct {
	lsn       string
	heapBytes int64
	indexes   []indexSnapshot
}

type indexSnapshot struct {
	name      string
	predicate string
	bytes     int64
	method    string // the access method: btree, gin
	leaf      int64  // -1 when not measured
}

// tupleCounts are pg_stat_user_tables' write counters of a table.
type tupleCounts struct {
	ins, upd, hot int64
}

// writeMeter measures a run's WriteCost on db: start before the clock, end
// when it stops (WAL and sizes), finish once the run's connections are
// closed (the statistics counters).
type writeMeter struct {
	env       *environment
	db        *database
	table     string
	leaf      bool // pgstattuple is installed in db
	leafNote  string
	before    relationSnapshot
	after     relationSnapshot
	tuplesBef tupleCounts
}

// startWriteMeter installs pgstattuple in db when it can (a note
// otherwise) and takes the snapshot the run's growth is measured from.
func startWriteMeter(ctx context.Context, env *environment, db *database, table string) (*writeMeter, error) {
	m := &writeMeter{env: env, db: db, table: table}
	conn, err := pgx.Connect(ctx, db.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple`); err != nil {
		m.leafNote = "pgstattuple is not available, no leaf tuple counts: " + strings.TrimSpace(err.Error())
	} else {
		m.leaf = true
	}
	if m.tuplesBef, err = readTupleCounts(ctx, conn, table); err != nil {
		return nil, err
	}
	// The WAL position last: the extension's own WAL is not the run's.
	m.before, err = m.snapshot(ctx, conn)
	return m, err
}

// end takes the snapshot at the end of the run: call it when the clock
// stops, before anything else writes.
func (m *writeMeter) end(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, m.db.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m.after, err = m.snapshot(ctx, conn)
	return err
}

// finish waits until no connection to the database is left (closeConns
// closes the run's own; their backends flush their statistics as they
// exit), reads the write counters from a new session and returns the
// run's cost for events.
func (m *writeMeter) finish(ctx context.Context, closeConns func(), events int) (*WriteCost, error) {
	closeConns()
	if err := m.waitNoBackends(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, m.db.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	after, err := readTupleCounts(ctx, conn, m.table)
	if err != nil {
		return nil, err
	}
	var wal int64
	if err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, m.after.lsn, m.before.lsn).Scan(&wal); err != nil {
		return nil, err
	}
	n := float64(events)
	w := &WriteCost{
		Table: m.table, Events: events, LeafNote: m.leafNote,
		InsertsPerEvent:    float64(after.ins-m.tuplesBef.ins) / n,
		UpdatesPerEvent:    float64(after.upd-m.tuplesBef.upd) / n,
		HOTUpdatesPerEvent: float64(after.hot-m.tuplesBef.hot) / n,
		TableBytesPerEvent: float64(m.after.heapBytes-m.before.heapBytes) / n,
		WALBytesPerEvent:   float64(wal) / n,
	}
	if upd := after.upd - m.tuplesBef.upd; upd > 0 {
		w.HOTShare = float64(after.hot-m.tuplesBef.hot) / float64(upd)
	}
	before := map[string]indexSnapshot{}
	for _, ix := range m.before.indexes {
		before[ix.name] = ix
	}
	for _, ix := range m.after.indexes {
		b, ok := before[ix.name]
		if !ok {
			continue // made during the run: no growth to measure
		}
		c := IndexCost{Name: ix.name, Predicate: ix.predicate, BytesBefore: b.bytes, BytesAfter: ix.bytes,
			BytesPerEvent: float64(ix.bytes-b.bytes) / n}
		if ix.leaf >= 0 && b.leaf >= 0 {
			v := float64(ix.leaf-b.leaf) / n
			c.LeafTuplesPerEvent = &v
		}
		w.Indexes = append(w.Indexes, c)
	}
	return w, nil
}

// waitNoBackends waits until pg_stat_activity lists no backend connected
// to the database: each has flushed its statistics by then.
func (m *writeMeter) waitNoBackends(ctx context.Context, limit time.Duration) error {
	conn, err := pgx.Connect(ctx, m.env.adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(limit)
	for {
		var left int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, m.db.name).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("write counters: %d connections to the database still open after %s", left, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// snapshot reads the WAL position first (what follows writes none), then
// the sizes of the table and its indexes, and with pgstattuple their leaf
// items (a read of every index page: it runs outside the clock).
func (m *writeMeter) snapshot(ctx context.Context, conn *pgx.Conn) (relationSnapshot, error) {
	var s relationSnapshot
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, pg_relation_size($1::regclass)`, m.table).Scan(&s.lsn, &s.heapBytes); err != nil {
		return s, err
	}
	rows, err := conn.Query(ctx, `SELECT c.relname, coalesce(pg_get_expr(i.indpred, i.indrelid), ''), pg_relation_size(c.oid), a.amname
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
		WHERE i.indrelid = $1::regclass ORDER BY c.relname`, m.table)
	if err != nil {
		return s, err
	}
	var ix indexSnapshot
	if _, err := pgx.ForEachRow(rows, []any{&ix.name, &ix.predicate, &ix.bytes, &ix.method}, func() error {
		ix.leaf = -1
		s.indexes = append(s.indexes, ix)
		return nil
	}); err != nil {
		return s, err
	}
	if !m.leaf {
		return s, nil
	}
	for i := range s.indexes {
		// pgstattuple reads b-trees (and hash, GiST indexes), not GIN: the
		// error text's pg_trgm index (migration 021) has no leaf count.
		if s.indexes[i].method != "btree" {
			continue
		}
		if err := conn.QueryRow(ctx, `SELECT tuple_count + dead_tuple_count FROM pgstattuple($1::regclass)`,
			pgx.Identifier{s.indexes[i].name}.Sanitize()).Scan(&s.indexes[i].leaf); err != nil {
			return s, fmt.Errorf("pgstattuple(%s): %w", s.indexes[i].name, err)
		}
	}
	return s, nil
}

// readTupleCounts reads pg_stat_user_tables' write counters of table.
func readTupleCounts(ctx context.Context, conn *pgx.Conn, table string) (tupleCounts, error) {
	var c tupleCounts
	err := conn.QueryRow(ctx, `SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::regclass`, table).
		Scan(&c.ins, &c.upd, &c.hot)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, fmt.Errorf("no statistics for table %s", table)
	}
	return c, err
}

// printWriteCosts prints the write costs of the rates that have one: a row
// per run, then a row per index with its bytes (and leaf items) per event
// in each run.
func printWriteCosts(out io.Writer, rates []Rate) {
	var runs []Rate
	for _, r := range rates {
		if r.Writes != nil {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(out, "writes per event (%s; pg_stat_user_tables once the run's connections are gone; WAL is the server's):\n", runs[0].Writes.Table)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tinserts\tupdates\tHOT share\theap B\tWAL B\t")
	for _, r := range runs {
		w := r.Writes
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.0f%%\t%.0f\t%.0f\t\n", r.Name, w.InsertsPerEvent, w.UpdatesPerEvent, w.HOTShare*100, w.TableBytesPerEvent, w.WALBytesPerEvent)
	}
	tw.Flush()

	var names []string
	seen := map[string]bool{}
	for _, r := range runs {
		for _, ix := range r.Writes.Indexes {
			if !seen[ix.Name] {
				seen[ix.Name] = true
				names = append(names, ix.Name)
			}
		}
	}
	fmt.Fprintln(out, "index growth per event: bytes (leaf items, net of deletions; a posting list counts once):")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "index\t"
	for _, r := range runs {
		header += r.Name + "\t"
	}
	fmt.Fprintln(tw, header)
	var notes []string
	for _, name := range names {
		row := name + "\t"
		for _, r := range runs {
			cell := ""
			for _, ix := range r.Writes.Indexes {
				if ix.Name != name {
					continue
				}
				cell = fmt.Sprintf("%.1f", ix.BytesPerEvent)
				if ix.LeafTuplesPerEvent != nil {
					cell += fmt.Sprintf(" (%.2f)", *ix.LeafTuplesPerEvent)
				}
			}
			row += cell + "\t"
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	for _, r := range runs {
		if r.Writes.LeafNote != "" {
			notes = append(notes, r.Name+": "+r.Writes.LeafNote)
		}
	}
	for _, n := range notes {
		fmt.Fprintln(out, "  "+n)
	}
	fmt.Fprintln(out, "  (an index entry is written per insert and per non-HOT update whose row version matches the index's predicate)")
	fmt.Fprintln(out)
}
