package maintenance

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
)

// LatencyBounds are the upper bounds of the rollup's latency buckets
// (received to processed): 0.5 ms and up by a factor of 2^(1/3) (26 %, the
// percentiles' resolution), to about 32 s; the last bucket takes the rest.
var LatencyBounds = func() []time.Duration {
	b := make([]time.Duration, 48)
	for i := range b {
		b[i] = time.Duration(float64(500*time.Microsecond) * math.Pow(2, float64(i)/3))
	}
	return b
}()

// latencyBucket is the bucket of d.
func latencyBucket(d time.Duration) int {
	i, _ := slices.BinarySearch(LatencyBounds, d)
	return i // len(LatencyBounds) for longer than the last bound
}

// Percentile returns the q-quantile (0 < q ≤ 1) of a latency histogram
// (counts per bucket of LatencyBounds, and one past it): the upper bound
// of the bucket it falls in (0 for an empty histogram; the last bound for
// the overflow bucket).
func Percentile(counts []int64, q float64) time.Duration {
	var total int64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			return LatencyBounds[min(i, len(LatencyBounds)-1)]
		}
	}
	return LatencyBounds[len(LatencyBounds)-1]
}

// tallyKey is a cell of the tally: a route's span starting at at.
type tallyKey struct {
	span  int
	at    int64 // unix seconds
	route string
}

// Tally counts a replica's outcomes per route and minute (and hour) in
// memory, between the rollup's rounds: the engine adds each outcome it
// wrote, the Rollup service adds the counts to the database and starts
// afresh. Safe for concurrent use.
type Tally struct {
	mu    sync.Mutex
	cells map[tallyKey]*driver.RollupCell
}

// NewTally returns an empty tally.
func NewTally() *Tally { return &Tally{cells: map[tallyKey]*driver.RollupCell{}} }

// Outcome is one row's outcome, as the tally counts it.
type Outcome struct {
	// Route is the route's label (the event type, or "other").
	Route string
	// Processed, Retried, Dead: which outcome it was.
	Processed, Retried, Dead bool
	// Latency is, for a processed row, its time from received to processed.
	Latency time.Duration
}

// Add counts outcomes that happened at at. A nil tally counts nothing.
func (t *Tally) Add(at time.Time, outcomes ...Outcome) {
	if t == nil || len(outcomes) == 0 {
		return
	}
	minute := at.Truncate(time.Minute).Unix()
	hour := at.Truncate(time.Hour).Unix()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range outcomes {
		for _, k := range [2]tallyKey{{driver.SpanMinute, minute, o.Route}, {driver.SpanHour, hour, o.Route}} {
			c, ok := t.cells[k]
			if !ok {
				c = &driver.RollupCell{Span: k.span, At: time.Unix(k.at, 0).UTC(), Route: k.route, Latency: make([]int64, len(LatencyBounds)+1)}
				t.cells[k] = c
			}
			switch {
			case o.Processed:
				c.Processed++
				c.Latency[latencyBucket(o.Latency)]++
			case o.Retried:
				c.Retried++
			case o.Dead:
				c.Dead++
			}
		}
	}
}

// drain takes the tally's cells, sorted by (span, at, route), and leaves
// it empty.
func (t *Tally) drain() []driver.RollupCell {
	t.mu.Lock()
	cells := t.cells
	t.cells = map[tallyKey]*driver.RollupCell{}
	t.mu.Unlock()
	out := make([]driver.RollupCell, 0, len(cells))
	for _, c := range cells {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b driver.RollupCell) int {
		return cmp.Or(cmp.Compare(a.Span, b.Span), a.At.Compare(b.At), cmp.Compare(a.Route, b.Route))
	})
	return out
}

// putBack returns cells a failed round did not write, for the next.
func (t *Tally) putBack(cells []driver.RollupCell) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cells {
		k := tallyKey{c.Span, c.At.Unix(), c.Route}
		cur, ok := t.cells[k]
		if !ok {
			cc := c
			t.cells[k] = &cc
			continue
		}
		cur.Processed += c.Processed
		cur.Retried += c.Retried
		cur.Dead += c.Dead
		for i := range cur.Latency {
			cur.Latency[i] += c.Latency[i]
		}
	}
}

// Rollup keeping: minutes two days, hours eight.
const (
	RollupMinutesKept = 48 * time.Hour
	RollupHoursKept   = 8 * 24 * time.Hour
	// RollupInterval is how often a replica adds its tally to the rollup.
	RollupInterval = 10 * time.Second
)

// Rollup is the service that adds a tally to the database's per-route
// rollup (migration 018) every RollupInterval, and deletes the cells past
// their keeping and the attempt histories of deleted rows (every ten
// minutes). A failed write keeps the counts for the next round; at
// Stop it writes what is left once more.
type Rollup struct {
	periodic
	db    *pgxpool.Pool
	tally *Tally
	log   zerolog.Logger
	m     *Metrics
	// lastPrune is when the cells past their keeping were last deleted.
	lastPrune time.Time
	// swept is how far the sweep of the histories of deleted rows got
	// (driver.SweepAttempts' cursor; zero: from the oldest).
	swept time.Time
}

// NewRollup returns the rollup of tally on db.
func NewRollup(db *pgxpool.Pool, tally *Tally, interval time.Duration, log zerolog.Logger, m *Metrics) *Rollup {
	r := &Rollup{db: db, tally: tally, log: log.With().Str("service", "rollup").Logger(), m: m}
	r.periodic = periodic{interval: interval, round: r.round}
	return r
}

// Stop stops the rounds and writes what the tally holds once more.
func (r *Rollup) Stop() {
	r.periodic.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.Flush(ctx)
}

func (r *Rollup) round(ctx context.Context) {
	_ = r.Flush(ctx)
	if time.Since(r.lastPrune) < 10*time.Minute {
		return
	}
	if _, err := driver.PruneRollup(ctx, r.db, RollupMinutesKept, RollupHoursKept); err != nil {
		r.dbError(err, "delete the rollup's old cells")
		return
	}
	r.lastPrune = time.Now()
	r.sweepAttempts(ctx)
}

// sweepBatches bounds the batches of one sweep of the histories of deleted
// rows (of driver.FailedBatch entries each); the next sweep goes on.
const sweepBatches = 20

// sweepAttempts deletes the attempt histories (migration 017) of rows that
// are gone, a few batches a round, from where the last round stopped.
func (r *Rollup) sweepAttempts(ctx context.Context) {
	for range sweepBatches {
		last, ok, err := driver.SweepAttempts(ctx, r.db, r.swept, driver.FailedBatch)
		if err != nil {
			r.dbError(err, "delete the attempt histories of deleted rows")
			return
		}
		if !ok {
			r.swept = time.Time{} // the next sweep starts from the oldest again
			return
		}
		r.swept = last
	}
}

// Flush adds the tally's cells to the database now (a round does it
// every interval); on an error the counts stay in the tally.
func (r *Rollup) Flush(ctx context.Context) error {
	cells := r.tally.drain()
	if len(cells) == 0 {
		return nil
	}
	if err := driver.AddRollup(ctx, r.db, cells); err != nil {
		r.tally.putBack(cells)
		r.dbError(err, "add the outcomes to the rollup (kept for the next round)")
		return err
	}
	return nil
}

func (r *Rollup) dbError(err error, msg string) {
	if r.m != nil && r.m.DBErrors != nil {
		r.m.DBErrors.WithLabelValues("rollup").Inc()
	}
	r.log.Warn().Err(err).Msg(msg)
}
