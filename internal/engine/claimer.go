package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/maintenance"
	"github.com/inboxd/inboxd/internal/startstop"
)

// claimer claims due rows and queues them on their routes: the claim loop,
// the claim plan (what the next claim may take, from the routes' room and
// the bytes held) and the poison search (the row whose data makes claims
// fail). It is a service (internal/startstop): Start launches the claim
// loop, which ends with ctx (or Stop); a claim in flight then finishes
// (see claim).
type claimer struct {
	startstop.Base
	b       *books        // the claimed rows go on the books
	db      *pgxpool.Pool // the engine's statements: tokens, suspects, the poison search
	claimDB *pgxpool.Pool // claims, on sessions that always walk the received index in order; set before Start
	archetype
	// wake is signalled (without blocking) when rows may be available: a
	// notification arrived, a rescue returned rows, or a claim came back
	// full.
	wake    chan struct{}
	stopCtx context.Context // ends at the hard shutdown deadline: bounds claims; set before Start
	work    context.Context // the handlers' contexts derive from it; set before Start
	// lastLoop is the unix nanoseconds when the claim loop last went
	// round (Pool.Progress).
	lastLoop atomic.Int64

	// Used and set by the claim loop alone.
	poisoned []int64 // rows that can be neither claimed nor dead-lettered
	// rowsPerHead is how many rows recent claims took per row that was not
	// a chain's follower (smoothed).
	rowsPerHead float64
	lastParked  int64 // rows the last claim parked
	lastWindow  int   // due rows the last claim read at most
}

// newClaimer returns the claimer of b, on db (the engine's pool).
func newClaimer(a archetype, b *books, db *pgxpool.Pool) *claimer {
	return &claimer{archetype: a, b: b, db: db, wake: make(chan struct{}, 1)}
}

// signalWake wakes the claim loop: rows may be available.
func (c *claimer) signalWake() { signal(c.wake) }

// Start launches the claim loop; it runs until ctx ends or Stop, which
// returns once it has (after the claim in flight, if any).
func (c *claimer) Start(ctx context.Context) error {
	return c.StartWith(ctx, func(ctx context.Context) error {
		c.Go(func() { c.loop(ctx) })
		return nil
	})
}

// loop claims rows while ctx is live and queues them on their routes.
// Each route holds up to its concurrency plus its prefetch; the pool holds
// up to ClaimBytes of rows (payloads, keys, headers). Under a backlog it claims once half the room
// is free, so every statement takes a large batch; after a notification or
// a poll tick any room is worth a claim.
func (c *claimer) loop(ctx context.Context) {
	poll := time.NewTicker(c.cfg.PollInterval)
	defer poll.Stop()
	pending, urgent := true, true
	// blockedByFull: the last claim found nothing while some route had no
	// room; room freeing up is then worth a claim.
	blockedByFull := false
	retry := backoff.NewRetrier(backoff.Exponential{Base: 100 * time.Millisecond, Max: 5 * time.Second})
	var bisect poisonSearch
	// tokens fires when a rate-limited route's bucket has new tokens for
	// a route the last claim had to cut (nil: none was cut).
	var tokens <-chan time.Time
	for {
		if ctx.Err() != nil {
			return
		}
		c.lastLoop.Store(c.clock.Now().UnixNano())
		req, activeRoom, activeCap := c.plan()
		// Under a backlog, claim once the routes that have rows have half
		// their room free, so every statement takes a large batch. A
		// notification or a poll tick is worth a claim sooner, with an
		// eighth of that room free (or none of it taken): new rows are not
		// kept waiting, and a busy pool does not spend a statement on a
		// handful of rows whenever a producer inserts.
		roomy := activeCap > 0 && activeRoom >= max(1, min(activeCap/2, c.cfg.ClaimBatch)) &&
			req.maxBytes >= c.cfg.ClaimBytes/2
		worthIt := activeCap == 0 || activeRoom >= max(1, min(activeCap/8, c.cfg.ClaimBatch/4))
		if pending && req.maxBytes > 0 && req.limit > 0 && (roomy || (urgent && worthIt)) {
			if bisect.active() {
				req.limit, req.chain, req.window = 1, 0, 0
			}
			tokens = nil
			if wait := c.takeTokens(&req); wait > 0 {
				tokens = time.After(wait)
			}
			if req.limit == 0 {
				// Only rate-limited routes had room, and no tokens.
				pending, blockedByFull = false, false
				continue
			}
			got, parked, err := c.claim(req)
			if err != nil {
				c.metrics.dbErrors.WithLabelValues("claim").Inc()
				if driver.Classify(err) == driver.DataError && c.searchPoison(&bisect, req, err) {
					continue
				}
				delay := retry.Failed()
				c.log.Error().Err(err).Dur("retry_in", delay).Msg("claim failed")
				if !backoff.Sleep(ctx, delay) {
					return
				}
				continue
			}
			retry.Succeeded()
			bisect.claimed()
			// Claim again while claims find work: a short claim says little
			// (routes without room cap it); an empty one that parked nothing
			// says the due rows are all taken, or wait for a full route. A
			// claim that parked rows moved a key's backlog out of the way:
			// the next one goes at once, however little room there is (a
			// hot key's backlog would otherwise be parked one batch per
			// poll, with every other key's rows waiting behind it).
			found := got > 0 || parked > 0
			pending, urgent, blockedByFull = found, parked > 0, !found && len(req.full) > 0
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
			pending, urgent = true, true
		case <-poll.C:
			pending, urgent = true, true
		case <-c.b.freed:
			if blockedByFull {
				pending, urgent = true, true
			}
		case <-tokens:
			tokens = nil
			pending, urgent = true, true
		}
	}
}

// claimPlan says what the next claim may take: each route's room and the
// rows that would start at once, the types to leave out, and the byte
// budget left. It also returns the room and the capacity (rows) of the
// active routes, those that got rows in recent claims.
func (c *claimer) plan() (req claimRequest, activeRoom, activeCap int) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	req = claimRequest{
		maxBytes:    c.cfg.ClaimBytes - c.b.heldBytes,
		firstAlways: c.b.heldBytes == 0,
	}
	now := c.clock.Now()
	maxPrefetch := c.b.routes.maxPrefetch()
	for key, rs := range c.b.routes.byKey {
		rs.adapt(now, maxPrefetch)
		room := c.b.routes.claimRoomLocked(rs, now)
		if now.Sub(rs.lastRows) < activeFor {
			activeRoom += room
			activeCap += rs.limit + rs.prefetch
		}
		if key != "" {
			req.routed = append(req.routed, key)
			if room > 0 {
				req.open = append(req.open, key)
			} else {
				req.full = append(req.full, key)
			}
			if rs.policy.Ordered {
				req.ordered = append(req.ordered, key)
				if rs.policy.BlocksKey() {
					req.blocking = append(req.blocking, key)
				}
			}
		} else {
			req.defaultOpen = room > 0
		}
		if room > 0 {
			req.rooms = append(req.rooms, routeRoom{route: key, room: room, idle: rs.startSoon()})
			req.limit += room
		}
	}
	// Every candidate row is locked, taken or not, and a lock is a write:
	// the limit follows the room of the routes that have rows (active), with
	// a little more so that rows of a quiet route still come in (and make it
	// active), not the room of every route.
	if activeRoom > 0 {
		req.limit = min(req.limit, activeRoom+min(claimSlack, req.limit-activeRoom))
	}
	req.limit = min(req.limit, c.cfg.ClaimBatch)
	if len(req.ordered) > 0 {
		// Chains fill a claim behind fewer heads: read about as many due
		// rows as the last claims took heads for the rows they took. While
		// claims park a backlog (half their window or more), the window
		// doubles: parking a key's backlog out of the way goes a window at
		// a time.
		req.chain = orderedChain
		req.window = max(min(req.limit, claimSlack), int(math.Ceil(float64(req.limit)/max(1, c.rowsPerHead))))
		if c.lastParked > 0 && c.lastParked >= int64(c.lastWindow/2) {
			req.window = max(req.window, 2*c.lastWindow)
		}
		req.window = min(req.window, req.limit)
	}
	// Outcomes not yet written hold their rows (and leases) too: while the
	// completers are a full route's worth behind, claim nothing more; each
	// written batch signals freed.
	if c.b.outcomesBehindLocked() >= c.cfg.maxCapacity() {
		req.limit = 0
	}
	return req, activeRoom, activeCap
}

// orderedChain is how many rows of an ordered key a claim takes behind the
// key's head, read through the key index: they wait in the worker, each
// started once the one before it ended so that the key may go on. A key's
// backlog then costs a claim per orderedChain+1 rows, rather than a claim,
// a park and an unpark per row.
const orderedChain = 16

// claimSlack is how many rows a claim may take beyond the active routes'
// room, for the routes that had no rows of late.
const claimSlack = 32

// activeFor is how long after a claim gave it rows a route counts as
// active: its room decides when the next claim is large enough.
const activeFor = 2 * time.Second

// claimRequest is what one claim statement asks for.
type claimRequest struct {
	limit       int            // most rows
	rooms       []routeRoom    // per route with room: how many rows, and how many start at once
	routed      []string       // the event types with a route of their own
	open, full  []string       // routed types with room, and without
	defaultOpen bool           // the default route (every other type) has room
	ordered     []string       // types of ordered routes
	blocking    []string       // types of ordered routes whose dead rows block their key
	maxBytes    int64          // most bytes of rows (payloads, keys, headers)
	firstAlways bool           // the first row even if it alone exceeds maxBytes
	only        int64          // just this row (0: any)
	chain       int            // most rows of an ordered key claimed behind its head (0: the head alone)
	window      int            // most due rows read and locked (0: limit); heads, whose chains fill the rest
	tokens      map[string]int // tokens granted to the rate-limited routes, by route (takeTokens)
}

// routeRoom is one route's room in a claim.
type routeRoom struct {
	route      string
	room, idle int
}

// claim takes due rows as req says and queues them on their routes. It
// returns how many rows it claimed and how many it parked (rows of ordered
// keys waiting behind an earlier row).
func (c *claimer) claim(req claimRequest) (int, int64, error) {
	token := rand.Int64()
	// The lease is counted from before the statement is sent: the database
	// starts it at some point during the round trip, never earlier.
	sent := c.clock.Now()
	// A claim is not cancelled half-way by shutdown: had the UPDATE committed
	// with its result lost, its rows would sit in processing until their
	// leases expired. Claimed rows are handled (and drained) normally. It is
	// bounded by the statement timeout and the hard shutdown deadline.
	ctx, cancel := context.WithTimeout(c.stopCtx, c.cfg.StatementTimeout)
	defer cancel()
	skip := c.poisoned
	// The byte budget as it is now (the hand-off at ingest may have taken
	// some since the plan), kept out of the hand-off's reach until the
	// claimed rows are on the books: held bytes never pass ClaimBytes
	// (but for a first row alone), whichever path brought the rows. With
	// a hand-off (worker.Config.HandOff) a claim takes half of what is left, so
	// that the hand-off is never shut out by a claim in flight.
	c.b.mu.Lock()
	budget := c.cfg.ClaimBytes - c.b.heldBytes
	if c.cfg.HandOff {
		budget /= 2 // the other half for the hand-off meanwhile
	}
	req.maxBytes = min(req.maxBytes, budget)
	req.firstAlways = req.firstAlways && c.b.heldBytes == 0
	c.b.claimingBytes = max(0, req.maxBytes)
	c.b.mu.Unlock()
	defer func() {
		c.b.mu.Lock()
		c.b.claimingBytes = 0
		c.b.mu.Unlock()
	}()
	// The claim is planned with its values every time (see openSessions'
	// plan_cache_mode).
	got, err := driver.Claim(ctx, c.claimDB, c.params(req, token, skip))
	if err != nil {
		c.giveBack(req, nil)
		return 0, 0, err
	}
	if len(req.tokens) > 0 {
		c.giveBack(req, rowsByRoute(req, got.Rows))
	}
	parked := got.Parked
	claimed := make([]claimedRow, len(got.Rows))
	for i := range got.Rows {
		claimed[i] = claimedRow{got.Rows[i]}
	}
	c.metrics.claims.Inc()
	c.metrics.claimed.Add(float64(len(claimed)))
	c.lastParked, c.lastWindow = parked, cmp.Or(req.window, req.limit)
	if req.chain > 0 && len(claimed) > 0 {
		heads := 0
		for i := range claimed {
			if claimed[i].Pred == 0 {
				heads++
			}
		}
		c.rowsPerHead = 0.5*max(1, c.rowsPerHead) + 0.5*float64(len(claimed))/float64(max(1, heads))
	}
	// Rows go to the queue in claim order: the first ones are those marked
	// started, for the idle executors.
	slices.SortFunc(claimed, func(a, b claimedRow) int { return cmp.Compare(a.Rank, b.Rank) })
	suspects, err := c.suspects(ctx, claimed)
	if err != nil {
		// The rows are claimed: run them, only without the care for
		// suspects (the next claim of a suspect asks again).
		c.metrics.dbErrors.WithLabelValues("claim").Inc()
		c.log.Warn().Err(err).Msg("looking up rows rescued after a crash failed")
	}
	jobs := make([]*job, len(claimed))
	for i := range claimed {
		jctx, cancel := context.WithCancelCause(c.work)
		jobs[i] = &job{
			ctx: jctx, cancel: cancel, row: claimed[i], token: token,
			state:       jobClaimed, // not on the books until track
			size:        claimed[i].size(),
			leaseUntil:  sent.Add(c.cfg.Lease),
			dbStarted:   claimed[i].Started,
			claimMarked: claimed[i].Started,
			suspect:     suspects[claimed[i].ID],
		}
	}
	c.b.track(jobs)
	return len(claimed), parked, nil
}

// rowsByRoute counts rows by the route req gave them: their type if routed,
// else the default route ("").
func rowsByRoute(req claimRequest, rows []driver.ClaimedRow) map[string]int {
	out := make(map[string]int)
	for i := range rows {
		key := rows[i].EventType
		if !slices.Contains(req.routed, key) {
			key = ""
		}
		out[key]++
	}
	return out
}

// suspects returns which of the claimed rows were last rescued after a
// started attempt (sql/suspects.sql): one of them may have killed its
// worker. Only rows attempted before are looked up, so a claim of first
// attempts costs nothing.
func (c *claimer) suspects(ctx context.Context, claimed []claimedRow) (map[int64]bool, error) {
	var ids []int64
	for i := range claimed {
		if claimed[i].Attempts > 1 {
			ids = append(ids, claimed[i].ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	found, err := driver.Suspects(ctx, c.db, ids, maintenance.ExpiredPrefix)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// claimParams are the claim statement's parameters for req.
func (c *claimer) params(req claimRequest, token int64, skip []int64) driver.ClaimParams {
	rooms := make([]driver.RouteRoom, len(req.rooms))
	for i, r := range req.rooms {
		rooms[i] = driver.RouteRoom{Route: r.route, Room: r.room, Idle: r.idle}
	}
	return driver.ClaimParams{
		Limit:         req.limit,
		Window:        req.window,
		Rooms:         rooms,
		RoutedTypes:   req.routed,
		OpenTypes:     req.open,
		FullTypes:     req.full,
		DefaultOpen:   req.defaultOpen,
		OrderedTypes:  req.ordered,
		BlockingTypes: req.blocking,
		MaxBytes:      req.maxBytes,
		FirstAlways:   req.firstAlways,
		Only:          req.only,
		Chain:         req.chain,
		Skip:          skip,
		Token:         token,
		Lease:         c.cfg.Lease,
		Worker:        c.cfg.ID,
		ExpiredPrefix: maintenance.ExpiredPrefix,
		NoHistory:     c.cfg.noHistory,
	}
}

// poisonSearch narrows down which row makes claims fail.
type poisonSearch struct {
	singles int // single-row claims left to try before batches resume
}

func (s *poisonSearch) active() bool { return s.singles > 0 }

func (s *poisonSearch) claimed() {
	if s.singles > 0 {
		s.singles--
	}
}

// searchPoison handles a claim that failed because of a row's data. A batch
// failure switches to single-row claims over as many rows as the batch
// asked for, since the culprit was among them; a single-row failure names
// the oldest due row as the suspect, confirms it with a claim of that row
// alone, and dead-letters it (or, if even that fails, skips it until
// restart). It reports whether to claim again at once.
func (c *claimer) searchPoison(s *poisonSearch, req claimRequest, claimErr error) bool {
	if limit := req.limit; limit > 1 {
		s.singles = limit
		c.log.Warn().Err(claimErr).Int("rows", limit).Msg("claim refused because of a row's data: claiming one row at a time to find it")
		return true
	}
	ctx, cancel := context.WithTimeout(c.stopCtx, c.cfg.StatementTimeout)
	defer cancel()
	skip := slices.Clone(c.poisoned)
	suspect, err := driver.PoisonCandidate(ctx, c.db, skip)
	if err != nil {
		return false
	}
	one := req
	one.tokens = nil // given back by the claim that took them
	one.limit, one.maxBytes, one.firstAlways, one.only, one.chain, one.window = 1, 1, true, suspect, 0, 0
	if _, _, err := c.claim(one); err == nil || driver.Classify(err) != driver.DataError {
		return err == nil // not the culprit after all (claimed normally), or the database is unwell
	}
	reason := fmt.Sprintf("claim refused by the database because of this row's data: %v", claimErr)
	c.metrics.poisoned.Inc()
	done, err := driver.Poison(ctx, c.db, suspect, *errText(errors.New(reason)))
	if err == nil && done {
		c.log.Error().Int64("row_id", suspect).Err(claimErr).Msg("row dead-lettered: its data makes every claim fail")
	} else {
		if len(c.poisoned) < maxPoisoned {
			c.poisoned = append(c.poisoned, suspect)
		}
		c.log.Error().Int64("row_id", suspect).Err(claimErr).AnErr("dead_letter_error", err).
			Msg("row skipped until restart: its data makes every claim fail and it cannot be dead-lettered")
	}
	s.singles = 0
	return true
}

// maxPoisoned caps the rows skipped in memory.
const maxPoisoned = 1000
