package engine

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// The hand-off at ingest (handoff.HandOff; migration 013): while this pool
// has idle handlers, the ingest of the same process inserts a batch's rows
// already reserved for them and hands them over in memory, so that they
// need no claim statement. Reserve takes the room first (a handler slot
// and the row's bytes, as a claim would, so claims see it taken); the
// insert writes the rows received with a reservation (a lease token, the
// lease's end as available_at, attempts 1); Deliver puts the rows that
// were inserted on the books, where they run at once, exactly as claimed
// rows marked started do: their leases are renewed, their outcomes fenced
// by the token, their bytes and their routes' concurrency counted, and
// shutdown drains them. Cancel gives the room back when the insert failed.
//
// Only rows a claim would mark started are reserved (claimRequest's
// idle counts, routeState.startSoon): those for idle handlers, and those
// due to start within premarkHorizon (handOffSoon), within the route's
// room; like those, each counts its attempt from the insert.
// They are received rows (never rejected ones) of a route that is not
// ordered (an ordered row may run only after the rows before it in its
// key, which only the claim's key lookups know), not paused, with its
// breaker closed and no rate limit (the fleet's token bucket is taken by
// claims), while the pool's byte budget has room. Duplicates are never
// handed off: the insert skips them, and Deliver only gets the rows it
// inserted.

// handOffSoon is how many rows the hand-off may reserve for rs now: as
// startSoon, those that start at once and those due to start within
// premarkHorizon behind the rows rs holds, but at the rate its handlers
// could start rows (capacity: concurrency over run time) when that is the
// higher. Its measured rate is what the claims gave it; under a backlog,
// at start, that is what a few claims could give, and the rows ingest
// would hand off are what lifts it. A row queued behind q others starts
// after about (q+1) run times over the concurrency: within premarkHorizon
// while q+1 <= capacity × premarkHorizon. The books' lock must be held.
func (rs *routeState) handOffSoon() int {
	rate := max(rs.rate, rs.capacity())
	return rs.idle() + max(0, int(rate*premarkHorizon.Seconds())-len(rs.queue)-rs.waiting)
}

// handOffMaxRowBytes is the largest row (payload, key and headers) handed
// off. A bigger one is stored plainly and claimed: for it the claim's
// update is a small part of the cost (the payload is written once,
// TOASTed, and not again by the claim), while handing it off would keep
// the message's buffer, read by ingest, alive until its handler returns,
// and with slow handlers ingest's memory would follow theirs (the 1 MiB
// fault scenario peaked 20 % higher).
const handOffMaxRowBytes = 64 << 10

// handOffBacklog is how many times the pool's capacity of outcomes may
// wait to be written before the hand-off stops (a claim stops at once).
const handOffBacklog = 4

// handOff is the hand-off at ingest: the Pool's Reserve, Deliver and
// Cancel (handoff.HandOff) on its books.
type handOff struct {
	b   *books
	db  *pgxpool.Pool // the engine's statements
	rel *releaser
	archetype
	// work is what the handed-off rows' contexts derive from, as the
	// claimed rows' (claimer.work); set before the books accept rows.
	work context.Context
}

// reservation is the room one Reserve took, until Deliver or Cancel.
type reservation struct {
	sent  time.Time     // before the insert was sent: the lease is counted from here
	slots []reservedRow // by place in the reservation, from 1 (index place-1)
}

// reservedRow is the room one reserved row takes.
type reservedRow struct {
	route *routeState
	size  int64
}

// reserve offers rows, about to be inserted by ingest in one statement,
// to this pool's idle handlers. It returns the reservation the insert
// writes (driver.InsertBatch), marking the rows taken, or nil when it
// takes none. Every non-nil reservation must end with Deliver or Cancel.
func (h *handOff) reserve(rows []driver.NewRow) *driver.Reservation {
	sent := h.clock.Now()
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if !h.b.accepting || h.b.stopping {
		return nil
	}
	// While the completers are behind, a claim takes nothing (claimer.plan);
	// the hand-off goes on a while longer: a row ingest does not hand off
	// is stored anyway, and costs a claim later. Its outcome waiting to be
	// written holds no payload. Only far behind does it stop too.
	if h.b.outcomesBehindLocked() >= handOffBacklog*h.cfg.maxCapacity() {
		return nil
	}
	var (
		pos []int32
		res *reservation
		// quota is what each route may still take in this reservation:
		// what a claim now would mark started (startSoon: its idle
		// handlers, and the rows due to start within premarkHorizon at
		// its measured rate), within its room.
		quota = make(map[*routeState]int, 1)
	)
	for i := range rows {
		r := &rows[i]
		if r.Status != status.Received {
			continue
		}
		rs := h.b.routes.forLocked(r.EventType)
		q, seen := quota[rs]
		if !seen {
			// The route's rate and prefetch, as the claim plan keeps them,
			// are brought up to date first: while every row is handed off,
			// claims (and their plans) are rare.
			rs.adapt(sent, h.b.routes.maxPrefetch())
			q = 0
			if !rs.policy.Ordered && !rs.paused && rs.breaker == breakerClosed && rs.policy.Rate <= 0 {
				q = min(rs.room(), rs.handOffSoon())
			}
		}
		size := int64(len(r.Payload) + len(r.Key) + len(r.Headers)) // as claimedRow.size
		if q <= 0 || size > handOffMaxRowBytes || h.b.heldBytes+h.b.claimingBytes+size > h.cfg.ClaimBytes {
			quota[rs] = q
			continue
		}
		quota[rs] = q - 1
		if res == nil {
			res = &reservation{sent: sent}
			pos = make([]int32, len(rows))
		}
		res.slots = append(res.slots, reservedRow{route: rs, size: size})
		pos[i] = int32(len(res.slots))
		rs.reserved++
		h.b.heldBytes += size
	}
	if res == nil {
		return nil
	}
	token := rand.Int64()
	for h.b.reservations[token] != nil || h.b.claims[token] != nil {
		token = rand.Int64()
	}
	h.b.reservations[token] = res
	return &driver.Reservation{Token: token, Lease: h.cfg.Lease, Worker: h.cfg.ID, Pos: pos}
}

// cancel gives back the room of a reservation whose insert failed: none of
// its rows is handed off. Should the insert have committed all the same
// (its answer lost), the rows wait in the inbox until the reservation
// lapses, then any claim takes them; the redelivered messages are
// duplicates, and are not handed off again.
func (h *handOff) cancel(r *driver.Reservation) {
	if r == nil {
		return
	}
	h.b.mu.Lock()
	h.endReservationLocked(r.Token)
	h.b.mu.Unlock()
	signal(h.b.freed)
}

// endReservationLocked gives back the room of the reservation token took
// and forgets it; it returns it (nil if unknown). The books' lock must be held.
func (h *handOff) endReservationLocked(token int64) *reservation {
	res := h.b.reservations[token]
	if res == nil {
		return nil
	}
	delete(h.b.reservations, token)
	for _, s := range res.slots {
		s.route.reserved--
		h.b.heldBytes -= s.size
	}
	return res
}

// deliver hands over the reserved rows that the insert of rows with r
// committed (got, from driver.InsertBatch): each runs at once on an idle
// handler. The room of the reserved rows not inserted (duplicates) is
// given back. Should the pool have begun to stop since Reserve, the rows
// are given back unstarted at once, their attempts refunded, as the
// shutdown gives back claimed rows that wait for a handler. ctx bounds
// that write.
func (h *handOff) deliver(ctx context.Context, r *driver.Reservation, rows []driver.NewRow, got []driver.Reserved) {
	if r == nil {
		return
	}
	h.b.mu.Lock()
	res := h.endReservationLocked(r.Token)
	if res == nil || len(got) == 0 {
		h.b.mu.Unlock()
		signal(h.b.freed)
		return
	}
	jobs := make([]*job, 0, len(got))
	for _, g := range got {
		i := rowIndex(r.Pos, g.Pos)
		if i < 0 {
			continue // not one of ours (cannot happen): left to lapse
		}
		nr := &rows[i]
		jctx, cancel := context.WithCancelCause(h.work)
		jobs = append(jobs, &job{
			ctx: jctx, cancel: cancel, token: r.Token,
			row: claimedRow{driver.ClaimedRow{
				Rank: int64(g.Pos), ID: g.ID, Source: nr.Source, EventID: nr.EventID, EventType: nr.EventType,
				Key: nr.Key, Payload: nr.Payload, Headers: nr.Headers, Attempts: 1, ReceivedAt: g.ReceivedAt,
				Started: true,
			}},
			state:       jobClaimed,
			size:        res.slots[g.Pos-1].size,
			leaseUntil:  res.sent.Add(h.cfg.Lease),
			dbStarted:   true,
			claimMarked: false, // inbox.started is not written: the reservation's attempt counts already
		})
	}
	if h.b.stopping {
		h.b.mu.Unlock()
		h.giveBack(ctx, jobs)
		return
	}
	releases := h.b.trackLocked(jobs)
	h.b.mu.Unlock()
	h.metrics.handedOff.Add(float64(len(jobs)))
	if len(releases) > 0 {
		h.rel.atRisk(releases)
	}
	signal(h.b.freed)
}

// rowIndex is the index in pos of the row at place want (-1: none).
func rowIndex(pos []int32, want int32) int {
	// Places are given in row order, so the row is at want-1 or after.
	for i := max(0, int(want)-1); i < len(pos); i++ {
		if pos[i] == want {
			return i
		}
	}
	return -1
}

// giveBack returns rows handed off while the pool stopped to the
// inbox unstarted, in one statement: due at once, their attempts refunded.
// If that fails, their reservations lapse and any claim takes them.
func (h *handOff) giveBack(ctx context.Context, jobs []*job) {
	slices.SortFunc(jobs, func(a, b *job) int { return cmp.Compare(a.row.ID, b.row.ID) }) // complete.sql's lock order
	batch := make([]driver.Completion, len(jobs))
	for i, j := range jobs {
		res := h.rel.result(j, "released unstarted at worker shutdown")
		batch[i] = driver.Completion{ID: res.id, Token: res.token, Status: res.status, Error: res.lastError, Release: true}
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StatementTimeout)
	defer cancel()
	if _, err := driver.Complete(ctx, h.db, batch, driver.Ordering{}); err != nil {
		h.log.Warn().Err(err).Int("rows", len(jobs)).
			Msg("giving back rows handed off during shutdown failed; they return when their reservations lapse")
		return
	}
	_ = driver.Notify(ctx, h.db)
	h.log.Info().Int("rows", len(jobs)).Msg("rows handed off during shutdown given back unstarted")
}
