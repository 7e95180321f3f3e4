package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/lease"
	"github.com/inboxd/inboxd/internal/startstop"
)

// Relay publishes the outbox table's pending rows. Several relays (one per
// replica) share the table's shards, each publishing the shards it holds a
// lease on.
type Relay struct {
	startstop.Base

	db      *pgxpool.Pool
	pubs    map[string]Publisher // by kind
	cfg     Config
	log     zerolog.Logger
	metrics *metrics
	id      string

	retry backoff.Exponential // of a refused row
	hold  backoff.Exponential // of a destination not reached

	// batches is held (read) by each batch from its read to its outcomes'
	// write, and (write) by a release of shards: a shard is never given
	// back with a batch of it in flight.
	batches sync.RWMutex
	mu      sync.Mutex // guards shards and held
	shards  map[int16]*shardLease
	held    map[string]*heldDestination

	ready      atomic.Bool
	lastLeased atomic.Int64 // unix nanoseconds of the last successful lease tick
}

// shardLease is a shard this relay holds: under which token, and until when
// by the local clock (measured from before the statement that took or
// renewed it, so never later than the database's expiry).
type shardLease struct {
	token    int64
	deadline time.Time
}

// heldDestination is a destination that could not be reached, left alone
// until until.
type heldDestination struct {
	until    time.Time
	failures int
}

// New returns a relay publishing through pubs (by kind: KindKafka,
// KindAMQP, KindNATS; a kind without a publisher holds its rows back). It
// validates cfg and registers the metrics on reg (nil: none).
func New(db *pgxpool.Pool, pubs map[string]Publisher, cfg Config, logger zerolog.Logger, reg prometheus.Registerer) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("outbox: no database pool")
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	id := cfg.RelayID
	if id == "" {
		id = relayID()
	}
	return &Relay{
		db: db, pubs: pubs, cfg: cfg, metrics: m, id: id,
		log:    logger.With().Str("component", "outbox").Str("relay", id).Logger(),
		retry:  backoff.Exponential{Base: DefaultRetryBase, Max: DefaultRetryMax},
		hold:   backoff.Exponential{Base: DefaultHoldBase, Max: DefaultHoldMax},
		shards: map[int16]*shardLease{},
		held:   map[string]*heldDestination{},
	}, nil
}

// relayID names a relay: host name, process id and a random suffix, so
// that a restarted process never takes its predecessor's leases for its
// own.
func relayID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ID is the relay's name in outbox_shards and outbox_relays.
func (r *Relay) ID() string { return r.id }

// Ready reports whether the relay reached the database at its last lease
// renewal, within the lease.
func (r *Relay) Ready() bool {
	last := r.lastLeased.Load()
	return r.ready.Load() && last != 0 && time.Since(time.Unix(0, last)) < r.cfg.Lease
}

// Start launches the relay: it publishes until Stop (or the end of ctx),
// then gives its shards back. The batches in flight at the stop are
// finished (within the publish timeout) and their outcomes written before
// Stop returns. A relay runs once (package startstop).
//
// Loops publish at once, each the shards s with s % Loops its own, so that a
// key (one shard) is published by one loop, in order, while the others go
// on: a relay is several database sessions, not one queued behind the
// writers'. The lease loop, here, renews and shares the shards; the
// maintenance loop reads the gauges and deletes published rows.
func (r *Relay) Start(ctx context.Context) error {
	return r.StartWith(ctx, func(ctx context.Context) error {
		r.Go(func() { r.maintain(ctx) })
		r.Go(func() {
			r.log.Info().Int("batch_size", r.cfg.BatchSize).Int("loops", r.cfg.Loops).Dur("lease", r.cfg.Lease).
				Strs("kinds", kinds(r.pubs)).Msg("outbox relay started")
			r.leaseTick(ctx) // the loops start with shards to publish
			var loops sync.WaitGroup
			for i := range r.cfg.Loops {
				loops.Add(1)
				r.Go(func() { defer loops.Done(); r.publishLoop(ctx, i) })
			}
			t := time.NewTicker(lease.ShardStep(r.cfg.Lease))
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					// The loops finish their batches; then the shards go back.
					loops.Wait()
					r.releaseAll()
					r.log.Info().Msg("outbox relay stopped")
					return
				case <-t.C:
					r.leaseTick(ctx)
				}
			}
		})
		return nil
	})
}

// publishLoop publishes loop's shards until ctx is done.
func (r *Relay) publishLoop(ctx context.Context, loop int) {
	for ctx.Err() == nil {
		r.batches.RLock()
		n, err := r.publishOnce(context.WithoutCancel(ctx), loop)
		r.batches.RUnlock()
		if err != nil && ctx.Err() == nil {
			r.log.Warn().Err(err).Int("loop", loop).Msg("outbox: reading the next batch failed; retrying")
		}
		if n > 0 && err == nil {
			// Rows are coming: read again at once, so that a row waits
			// for the batch before it, not for the poll interval.
			continue
		}
		t := time.NewTimer(r.cfg.PollInterval)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// kinds lists the kinds of pubs, sorted.
func kinds(pubs map[string]Publisher) []string {
	ks := make([]string, 0, len(pubs))
	for k := range pubs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// statementTimeout bounds the relay's own statements.
func (r *Relay) statementTimeout() time.Duration { return lease.ShardStep(r.cfg.Lease) }

// leaseTick beats, renews the shards held, and takes or gives back shards
// towards this relay's share: the 32 shards over the relays alive. Its
// statements run without r.mu; only their results are applied under it.
func (r *Relay) leaseTick(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, r.statementTimeout())
	defer cancel()
	alive, err := driver.OutboxBeat(sctx, r.db, r.id, r.cfg.Lease, 10*r.cfg.Lease)
	if err != nil {
		r.leaseFailed(err)
		return
	}
	if held := r.heldLeases(nil); len(held) > 0 {
		start := time.Now()
		renewed, err := driver.RenewShards(sctx, r.db, r.id, held, r.cfg.Lease)
		if err != nil {
			r.leaseFailed(err)
			return
		}
		kept := map[int16]bool{}
		r.mu.Lock()
		for _, s := range renewed {
			if l, ok := r.shards[s]; ok {
				kept[s] = true
				l.deadline = start.Add(r.cfg.Lease)
			}
		}
		for _, l := range held {
			if !kept[l.Shard] {
				delete(r.shards, l.Shard)
				r.metrics.leaseLost.Inc()
				r.log.Warn().Int16("shard", l.Shard).Msg("outbox shard lease lost before its renewal; another relay may publish it now")
			}
		}
		r.mu.Unlock()
	}
	share := (driver.OutboxShards + alive - 1) / alive
	switch n := r.owned(); {
	case n < share:
		start := time.Now()
		got, err := driver.AcquireShards(sctx, r.db, r.id, share-n, r.cfg.Lease)
		if err != nil {
			r.leaseFailed(err)
			return
		}
		r.mu.Lock()
		for _, l := range got {
			r.shards[l.Shard] = &shardLease{token: l.Token, deadline: start.Add(r.cfg.Lease)}
		}
		r.mu.Unlock()
		if len(got) > 0 {
			r.log.Info().Int("taken", len(got)).Int("held", r.owned()).Int("relays", alive).Msg("outbox shards taken")
		}
	case n > share:
		// No batch in flight while shards are given back.
		r.batches.Lock()
		held := r.heldLeases(nil)
		slices.SortFunc(held, func(a, b driver.ShardLease) int { return int(a.Shard) - int(b.Shard) })
		extra := held[share:]
		err := driver.ReleaseShards(sctx, r.db, r.id, extra)
		if err == nil {
			r.mu.Lock()
			for _, l := range extra {
				delete(r.shards, l.Shard)
			}
			r.mu.Unlock()
		}
		r.batches.Unlock()
		if err != nil {
			r.leaseFailed(err)
			return
		}
		r.log.Info().Int("released", len(extra)).Int("held", r.owned()).Int("relays", alive).Msg("outbox shards given back to share them")
	}
	r.metrics.owned.Set(float64(r.owned()))
	r.lastLeased.Store(time.Now().UnixNano())
	r.ready.Store(true)
}

func (r *Relay) leaseFailed(err error) {
	r.log.Warn().Err(err).Msg("outbox: renewing shard leases failed; publishing only while the leases last")
}

// owned is how many shards the relay holds.
func (r *Relay) owned() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.shards)
}

// heldLeases returns the leases of shards (all held shards when nil).
func (r *Relay) heldLeases(shards []int16) []driver.ShardLease {
	r.mu.Lock()
	defer r.mu.Unlock()
	if shards == nil {
		for s := range r.shards {
			shards = append(shards, s)
		}
	}
	out := make([]driver.ShardLease, 0, len(shards))
	for _, s := range shards {
		if l, ok := r.shards[s]; ok {
			out = append(out, driver.ShardLease{Shard: s, Token: l.token})
		}
	}
	return out
}

// releaseAll gives every shard back, at shutdown once the loops stopped,
// so that the other relays take them at once.
func (r *Relay) releaseAll() {
	held := r.heldLeases(nil)
	if len(held) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.statementTimeout())
	defer cancel()
	if err := driver.ReleaseShards(ctx, r.db, r.id, held); err != nil {
		r.log.Warn().Err(err).Msg("outbox: giving the shards back failed; others take them when the leases expire")
	}
	r.mu.Lock()
	clear(r.shards)
	r.mu.Unlock()
	r.metrics.owned.Set(0)
}

// usable returns the leases of loop's shards that a batch may be published
// on now (at least a third of the lease left), and the earliest of their
// ends.
func (r *Relay) usable(now time.Time, loop int) ([]driver.ShardLease, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []driver.ShardLease
	var end time.Time
	for s, l := range r.shards {
		if int(s)%r.cfg.Loops != loop || l.deadline.Sub(now) < lease.ShardStep(r.cfg.Lease) {
			continue
		}
		out = append(out, driver.ShardLease{Shard: s, Token: l.token})
		if end.IsZero() || l.deadline.Before(end) {
			end = l.deadline
		}
	}
	return out, end
}

// heldNow lists the destinations held back now.
func (r *Relay) heldNow(now time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for d, h := range r.held {
		if now.Before(h.until) {
			out = append(out, d)
		}
	}
	return out
}

// publishOnce reads one batch of loop's shards, publishes it and writes
// the outcomes. It returns the rows read.
func (r *Relay) publishOnce(ctx context.Context, loop int) (int, error) {
	now := time.Now()
	leases, leaseEnd := r.usable(now, loop)
	if len(leases) == 0 {
		return 0, nil
	}
	shards := make([]int16, len(leases))
	for i, l := range leases {
		shards[i] = l.Shard
	}
	sctx, cancel := context.WithTimeout(ctx, r.statementTimeout())
	rows, err := driver.ClaimOutbox(sctx, r.db, driver.OutboxClaim{
		Shards: shards, Held: r.heldNow(now), Batch: r.cfg.BatchSize, Bytes: r.cfg.BatchBytes,
	})
	cancel()
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	outcomes := r.publish(ctx, rows, leaseEnd)
	r.record(ctx, leases, leaseEnd, outcomes)
	return len(rows), nil
}

// result is what became of one row of a batch.
type result struct {
	row     *driver.OutboxRow
	err     error // nil: acknowledged
	skipped bool  // not sent: an earlier row of its key failed first, or the batch's time ran out
}

// publish sends rows through their publishers, the kinds at once, and
// returns the outcomes to write. It is the one place that decides what a
// batch publishes: a key's rows are sent in id order, and after any
// failure of one of them (refused, before or after it was sent, or not
// reached) none after it is sent in this batch (publishKind).
func (r *Relay) publish(ctx context.Context, rows []driver.OutboxRow, leaseEnd time.Time) []driver.OutboxOutcome {
	results := make([]result, len(rows))
	dests := make([]Destination, len(rows))
	byKind := map[string][]int{} // indexes into rows, in id order
	for i := range rows {
		results[i].row = &rows[i]
		dest, err := ParseDestination(rows[i].Destination)
		switch {
		case err != nil:
			// Every row of its key has the same destination: refused alike.
			results[i].err = Refused("%v", err)
		case r.pubs[dest.Kind] == nil:
			results[i].err = errNoPublisher{kind: dest.Kind}
		default:
			dests[i] = dest
			byKind[dest.Kind] = append(byKind[dest.Kind], i)
		}
	}

	start := time.Now()
	deadline := earliest(leaseEnd, start.Add(r.cfg.PublishTimeout))
	pctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// No round starts past half the batch's time: a long batch (one key's
	// many rows, one round trip each) leaves its rest for the next batch
	// rather than running into the deadline, whose failures would hold
	// the destination back as not reached.
	lastRound := start.Add(deadline.Sub(start) / 2)
	var wg sync.WaitGroup
	for kind, idx := range byKind {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.publishKind(pctx, lastRound, r.pubs[kind], rows, dests, idx, results)
		}()
	}
	wg.Wait()
	return r.outcomes(results)
}

// publishKind publishes the rows idx (indexes into rows, in id order, all
// of p's kind) in rounds, writing each row's result. A round sends, of
// every key not stopped, its next row (its next rows, up to the first that
// Check refuses, when p.PipelinesKeys), and every row without a key in the
// first; a key whose row failed in a round, or was refused by Check, is
// stopped: its later rows are skipped, pending as they were, and read
// again with it in a later batch. Rounds go on until every row is sent or
// skipped; none starts after lastRound (but the first) or once ctx ended:
// the rows not sent then are skipped.
func (r *Relay) publishKind(ctx context.Context, lastRound time.Time, p Publisher, rows []driver.OutboxRow, dests []Destination,
	idx []int, results []result) {
	type queue struct{ rows []int }
	var queues []*queue
	byKey := map[string]*queue{}
	for _, i := range idx {
		k := keyOf(&rows[i])
		q := byKey[k]
		if q == nil || k == "" {
			q = &queue{}
			queues = append(queues, q)
			if k != "" {
				byKey[k] = q
			}
		}
		q.rows = append(q.rows, i)
	}
	pipelined := p.PipelinesKeys()
	stop := func(q *queue) {
		for _, i := range q.rows {
			results[i].skipped = true
		}
		q.rows = nil
	}
	for round := 0; ctx.Err() == nil && (round == 0 || time.Now().Before(lastRound)); round++ {
		var batch []int // indexes into rows
		var msgs []Message
		for _, q := range queues {
			for len(q.rows) > 0 {
				i := q.rows[0]
				q.rows = q.rows[1:]
				m := r.message(&rows[i], dests[i])
				if results[i].err = p.Check(m); results[i].err != nil {
					stop(q)
					break
				}
				batch, msgs = append(batch, i), append(msgs, m)
				if !pipelined {
					break
				}
			}
		}
		if len(batch) == 0 {
			return
		}
		errs := p.Publish(ctx, msgs)
		failed := map[string]bool{}
		for j, i := range batch {
			if j < len(errs) {
				results[i].err = errs[j]
			} else {
				results[i].err = errors.New("publisher returned no result")
			}
			if results[i].err != nil {
				failed[keyOf(&rows[i])] = true
			}
		}
		for k := range failed {
			if q := byKey[k]; q != nil {
				stop(q)
			}
		}
	}
	for _, q := range queues {
		stop(q)
	}
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// noPublisherHold is how long the rows of a kind without a publisher are
// left alone between two looks.
const noPublisherHold = time.Minute

// errNoPublisher holds back the rows of a kind no broker is configured for.
type errNoPublisher struct{ kind string }

func (e errNoPublisher) Error() string {
	return fmt.Sprintf("no %s publisher configured (set the %s broker's variables)", e.kind, e.kind)
}

// keyOf identifies a row's ordering key, "" for a row without one.
func keyOf(row *driver.OutboxRow) string {
	if row.Key == "" {
		return ""
	}
	return row.Destination + "\x1f" + row.Key
}

// message is what a publisher sends of row (newMessage).
func (r *Relay) message(row *driver.OutboxRow, dest Destination) Message {
	return newMessage(row.ID, dest, row.EventID, row.EventType, row.Key, row.Headers, row.Payload)
}

// outcomes turns a batch's results into the rows' outcomes, counts them,
// and holds back the destinations that could not be reached. A row not
// reached, or not sent, gets no outcome: it stays pending as it was.
func (r *Relay) outcomes(results []result) []driver.OutboxOutcome {
	now := time.Now()
	out := make([]driver.OutboxOutcome, 0, len(results))
	reached := map[string]bool{}
	unreached := map[string]error{}
	for _, res := range results {
		row := res.row
		label := r.metrics.destination(row.Destination)
		switch {
		case res.skipped:
		case res.err == nil:
			reached[row.Destination] = true
			r.metrics.published.WithLabelValues(label).Inc()
			r.metrics.latency.Observe(now.Sub(row.CreatedAt).Seconds())
			out = append(out, driver.OutboxOutcome{ID: row.ID, Status: driver.OutboxPublished})
		case errors.Is(res.err, ErrRefused):
			reached[row.Destination] = true
			r.metrics.failed.WithLabelValues(label, "refused").Inc()
			attempt := row.Attempts + 1
			o := driver.OutboxOutcome{ID: row.ID, Status: driver.OutboxPending, Error: res.err.Error(),
				Delay: r.retry.Delay(attempt)}
			ev := r.log.Warn()
			if attempt >= r.cfg.MaxAttempts || errors.Is(res.err, ErrUnencodable) {
				o.Status = driver.OutboxDead
				r.metrics.deadTotal.WithLabelValues(label).Inc()
				ev = r.log.Error()
			}
			ev.Err(res.err).Int64("row_id", row.ID).Str("event_id", row.EventID).Str("destination", row.Destination).
				Int("attempt", attempt).Str("status", o.Status).Msg("outbox message refused by the broker")
			out = append(out, o)
		default:
			r.metrics.failed.WithLabelValues(label, "unavailable").Inc()
			if _, seen := unreached[row.Destination]; !seen {
				unreached[row.Destination] = res.err
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range reached {
		if _, bad := unreached[d]; !bad {
			delete(r.held, d)
		}
	}
	for d, err := range unreached {
		h := r.held[d]
		if h == nil {
			h = &heldDestination{}
			r.held[d] = h
		}
		h.failures++
		var np errNoPublisher
		if errors.As(err, &np) {
			// A configuration matter, not an outage: said once, checked
			// again every minute.
			h.until = now.Add(noPublisherHold)
			if h.failures == 1 {
				r.log.Error().Err(err).Str("destination", d).
					Msg("outbox rows for a kind of broker this relay has no settings for: they wait, pending")
			}
			continue
		}
		delay := r.hold.Delay(h.failures)
		h.until = now.Add(delay)
		r.log.Warn().Err(err).Str("destination", d).Int("failures", h.failures).Dur("retry_in", delay).
			Msg("outbox destination not reached; its messages wait, the others go on")
	}
	return out
}

// record writes outcomes, fenced by leases, retrying while the leases last:
// a row whose outcome is not written stays pending and is published again
// (a duplicate with the same event id), never lost.
func (r *Relay) record(ctx context.Context, leases []driver.ShardLease, leaseEnd time.Time, outcomes []driver.OutboxOutcome) {
	if len(outcomes) == 0 {
		return
	}
	retry := backoff.Exponential{Base: 50 * time.Millisecond, Max: time.Second}
	for attempt := 1; ; attempt++ {
		sctx, cancel := context.WithDeadline(ctx, earliest(leaseEnd, time.Now().Add(r.statementTimeout())))
		written, err := driver.RecordOutbox(sctx, r.db, r.id, leases, outcomes)
		cancel()
		if err == nil {
			if n := len(outcomes) - len(written); n > 0 {
				r.metrics.fenced.Add(float64(n))
				r.log.Warn().Int("rows", n).Msg("outbox outcomes fenced: a shard's lease is no longer this relay's, and its new holder publishes them again (or the rows were discarded while in flight)")
			}
			return
		}
		if time.Until(leaseEnd) <= 0 {
			r.log.Error().Err(err).Int("rows", len(outcomes)).
				Msg("outbox outcomes not written before the leases ended; these rows are published again")
			return
		}
		delay := retry.Delay(attempt)
		r.log.Warn().Err(err).Int("rows", len(outcomes)).Dur("retry_in", delay).Msg("writing outbox outcomes failed; retrying")
		if !backoff.Sleep(ctx, min(delay, time.Until(leaseEnd))) {
			return
		}
	}
}

// maintain refreshes the table-wide gauges and runs retention until ctx is
// done.
func (r *Relay) maintain(ctx context.Context) {
	stats := time.NewTicker(r.cfg.StatsInterval)
	defer stats.Stop()
	var retention <-chan time.Time
	if r.cfg.Retention >= 0 {
		t := time.NewTicker(r.cfg.RetentionInterval)
		defer t.Stop()
		retention = t.C
	}
	r.readStats(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-stats.C:
			r.readStats(ctx)
		case <-retention:
			r.deletePublished(ctx)
		}
	}
}

func (r *Relay) readStats(ctx context.Context) {
	for kind, p := range r.pubs {
		up := 0.0
		if p.Ready() {
			up = 1
		}
		r.metrics.brokerUp.WithLabelValues(kind).Set(up)
	}
	sctx, cancel := context.WithTimeout(ctx, r.statementTimeout())
	defer cancel()
	s, err := driver.ReadOutboxStats(sctx, r.db)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("outbox: reading the gauges failed")
		}
		return
	}
	r.metrics.pending.Set(float64(s.Pending))
	r.metrics.oldest.Set(s.OldestPending.Seconds())
	r.metrics.dead.Set(float64(s.Dead))
}

// retentionBatch is how many rows one retention statement deletes.
const retentionBatch = 5000

func (r *Relay) deletePublished(ctx context.Context) {
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, r.statementTimeout())
		n, err := driver.DeletePublished(sctx, r.db, r.cfg.Retention, retentionBatch)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn().Err(err).Msg("outbox retention failed; retrying at the next interval")
			}
			return
		}
		r.metrics.deleted.Add(float64(n))
		if n < retentionBatch {
			return
		}
	}
}

// SetBackoffs replaces the delays before a refused row is tried again
// (retry) and before a destination not reached is tried again (hold), for
// the tests that run a relay on real publishers (package publishers): call
// it before Run.
func (r *Relay) SetBackoffs(retry, hold backoff.Exponential) { r.retry, r.hold = retry, hold }

// Backoffs returns the delays SetBackoffs sets.
func (r *Relay) Backoffs() (retry, hold backoff.Exponential) { return r.retry, r.hold }

// FailedCount is the outbox_failed_total counter of dest and reason: how
// many publications to it failed so, for the same tests.
func (r *Relay) FailedCount(dest, reason string) prometheus.Counter {
	return r.metrics.failed.WithLabelValues(r.metrics.destination(dest), reason)
}
