package engine

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/worker"
)

// routeState is one route's share of the pool: how many of its rows may
// run at once and wait claimed, and those it holds. The key is the routed
// event type, or "" for the default route (every other type).
type routeState struct {
	key      string
	policy   routePolicy // resolved once, at each sync with the registry
	limit    int         // most rows in handlers at once (Policy.Concurrency)
	prefetch int         // most rows claimed and waiting beyond limit
	queue    []*job      // claimed, waiting for a handler, in claim order
	running  int
	waiting  int       // claimed behind the row before them in an ordered key's chain
	reserved int       // idle handlers promised to rows being inserted by ingest (handoff.go)
	lastRows time.Time // when a claim last gave it rows
	// batchTimer dispatches a batch route's batch that waits for more rows
	// once its Batch.MaxWait is up (batch.go); nil when none waits.
	batchTimer *time.Timer
	gauges     *routeGauges

	// Route controls (controls.go).
	paused    bool         // paused by an operator: no claims
	breaker   breakerState // its circuit breaker (Policy.Breaker)
	failures  int          // consecutive failed attempts, while closed
	openUntil time.Time    // when an open breaker half-opens
	// fileRate and fileBurst are the route's own rate limit (its policy's
	// before an operator's override, which policy.Rate and policy.Burst
	// hold while it is set).
	fileRate  float64
	fileBurst int
	// resetSeen is the last breaker reset read (nil: none yet); a newer
	// one closes the breaker.
	resetSeen *time.Time

	// Adaptive prefetch (worker.Config.Prefetch left at 0): the route's handling
	// rate, measured from its handlers' returns.
	basePrefetch int       // the prefetch it never goes below
	returned     int64     // handlers returned so far
	rateFrom     int64     // returned at rateAt
	rateAt       time.Time // when the rate was last updated
	rate         float64   // handlers returned per second, smoothed
	// runTime is how long its handlers run, smoothed (ranFor): with its
	// concurrency, the rate it could sustain (capacity), which its
	// measured rate only reaches while rows keep coming.
	runTime time.Duration
}

// ranFor feeds rs's handler run time with one handler's. The books' lock
// must be held.
func (rs *routeState) ranFor(d time.Duration) {
	if rs.runTime == 0 {
		rs.runTime = max(d, time.Nanosecond)
		return
	}
	rs.runTime += (d - rs.runTime) / 8
	rs.runTime = max(rs.runTime, time.Nanosecond)
}

// capacity is the rows per second rs's handlers could start, from their
// run time and its concurrency (0 before any returned).
func (rs *routeState) capacity() float64 {
	if rs.runTime <= 0 {
		return 0
	}
	return float64(rs.limit) / rs.runTime.Seconds()
}

// prefetchHorizon is how much of a route's work, at its measured rate, an
// adaptive prefetch holds waiting: enough for the handlers never to wait
// for a claim, little enough that one replica does not sit on rows another
// could run.
const prefetchHorizon = 250 * time.Millisecond

// adapt updates rs's measured rate and, when maxPrefetch > 0, sets its
// prefetch to about prefetchHorizon of work, between its base and
// maxPrefetch. The books' lock must be held.
func (rs *routeState) adapt(now time.Time, maxPrefetch int) {
	if rs.rateAt.IsZero() {
		rs.rateAt, rs.rateFrom = now, rs.returned
		return
	}
	dt := now.Sub(rs.rateAt)
	if dt < 100*time.Millisecond {
		return
	}
	inst := float64(rs.returned-rs.rateFrom) / dt.Seconds()
	if dt > 5*time.Second {
		rs.rate = inst // an old rate says nothing: start afresh
	} else {
		rs.rate = 0.5*rs.rate + 0.5*inst
	}
	rs.rateAt, rs.rateFrom = now, rs.returned
	if maxPrefetch > 0 {
		want := int(rs.rate * prefetchHorizon.Seconds())
		rs.prefetch = min(maxPrefetch, max(rs.basePrefetch, want))
	}
}

// held is the rows the route holds or has promised a handler: claimed and
// waiting, running, and reserved at ingest (handoff.go), against its room.
func (rs *routeState) held() int { return len(rs.queue) + rs.running + rs.waiting + rs.reserved }

// dequeue takes j out of rs's queue: most often its head (dispatch).
func (rs *routeState) dequeue(j *job) {
	if len(rs.queue) > 0 && rs.queue[0] == j {
		rs.queue[0] = nil
		rs.queue = rs.queue[1:]
		return
	}
	if i := slices.Index(rs.queue, j); i >= 0 {
		rs.queue = slices.Delete(rs.queue, i, i+1)
	}
}

// room is how many more rows the route may claim now.
func (rs *routeState) room() int { return max(0, rs.limit+rs.prefetch-rs.held()) }

// idle is how many of the rows claimed now would start at once.
func (rs *routeState) idle() int { return max(0, rs.limit-rs.held()) }

// startSoon is how many of the rows claimed now the claim marks started:
// those that start at once (idle), and those expected to start within
// premarkHorizon at the route's measured rate behind the rows already
// queued. Marking them in the claim costs no statement of its own (see
// premarkHorizon).
func (rs *routeState) startSoon() int {
	return rs.idle() + max(0, int(rs.rate*premarkHorizon.Seconds())-len(rs.queue))
}

// routePolicy is a route's policy resolved once (when the route syncs
// with the registry): handlers.Policy with the pool's defaults filled in,
// its retry policy, and the cap on the delays its handlers ask for.
type routePolicy struct {
	handlers.Policy
	retry    worker.RetryPolicy
	maxDelay time.Duration
}

// routeGauges are one route's gauges, looked up once.
type routeGauges struct {
	limit, running, queued prometheus.Gauge
	paused, breaker        prometheus.Gauge
}
