package engine

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/internal/maintenance"
)

// Outcomes of one handled row, used as the outcome label.
const (
	outcomeProcessed = "processed"
	outcomeRetried   = "retried"
	outcomeDead      = "dead"
	outcomeReleased  = "released"
)

// otherEventTypes is the event_type label of every type without a route of
// its own: label values stay bounded by the routes, whatever types arrive.
const otherEventTypes = "other"

// metrics are the worker's Prometheus metrics.
type metrics struct {
	claims          prometheus.Counter
	claimed         prometheus.Counter
	handedOff       prometheus.Counter
	completed       *prometheus.CounterVec
	fenced          prometheus.Counter
	handlerDuration *prometheus.HistogramVec
	panics          prometheus.Counter
	inflight        prometheus.Gauge
	renewals        prometheus.Counter
	leaseLost       prometheus.Counter
	dbErrors        *prometheus.CounterVec

	routeLimit        *prometheus.GaugeVec
	routeRunning      *prometheus.GaugeVec
	routeQueued       *prometheus.GaugeVec
	routePaused       *prometheus.GaugeVec
	routeBreaker      *prometheus.GaugeVec
	routeRateLimited  *prometheus.CounterVec
	outcomeWriteDelay prometheus.Histogram
	heldBytes         prometheus.Gauge
	leaseAtRisk       prometheus.Counter
	poisoned          prometheus.Counter
	stuckHandlers     prometheus.Counter

	// maintenance are the maintenance services' (internal/maintenance),
	// registered with these.
	maintenance *maintenance.Metrics

	// handlers and outcomes cache the children of handlerDuration and
	// completed by their label values ([2]string{outcome, event_type}):
	// they are used for every row, and WithLabelValues hashes and compares
	// the label values under a lock each time. Their label values are
	// bounded (outcomes by the routed types) and never deleted, so a
	// cached child stays the vector's own.
	handlers sync.Map // [2]string → prometheus.Observer
	outcomes sync.Map // [2]string → prometheus.Counter
}

// handlerObserver is handlerDuration.WithLabelValues(result, eventType),
// cached.
func (m *metrics) handlerObserver(result, eventType string) prometheus.Observer {
	return cachedChild[prometheus.Observer](&m.handlers, m.handlerDuration, result, eventType)
}

// completedCounter is completed.WithLabelValues(outcome, eventType),
// cached.
func (m *metrics) completedCounter(outcome, eventType string) prometheus.Counter {
	return cachedChild[prometheus.Counter](&m.outcomes, m.completed, outcome, eventType)
}

// labeledVec is a metric vector whose children are of type T.
type labeledVec[T any] interface {
	WithLabelValues(lvs ...string) T
}

// cachedChild is vec.WithLabelValues(a, b), looked up in cache first and
// stored there the first time (a child never deleted stays the vector's).
func cachedChild[T any](cache *sync.Map, vec labeledVec[T], a, b string) T {
	k := [2]string{a, b}
	if v, ok := cache.Load(k); ok {
		return v.(T)
	}
	v, _ := cache.LoadOrStore(k, vec.WithLabelValues(a, b))
	return v.(T)
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_worker_claims_total",
			Help: "Claim statements run.",
		}),
		claimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_worker_claimed_rows_total",
			Help: "Rows claimed for processing.",
		}),
		handedOff: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_worker_handed_off_rows_total",
			Help: "Rows handed to this replica's handlers by its ingest as they were inserted, with no claim.",
		}),
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inboxd_worker_completed_total",
			Help: "Row outcomes written, by outcome (processed, retried, dead, released) and event type " +
				"(the routed types; every other type is \"other\").",
		}, []string{"outcome", "event_type"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_worker_fenced_total",
			Help: "Completions not applied because the row's lease token had changed.",
		}),
		handlerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "inboxd_worker_handler_duration_seconds",
			Help:    "Time spent in handlers, by outcome and event type (the routed types; every other type is \"other\").",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"outcome", "event_type"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_worker_handler_panics_total",
			Help: "Handler panics recovered (each counts as a failed attempt).",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inboxd_worker_inflight",
			Help: "Rows currently held by this worker's handlers.",
		}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_worker_lease_renewals_total",
			Help: "Leases extended for long-running handlers.",
		}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_worker_lease_lost_total",
			Help: "Handlers cancelled because renewing their lease found the row fenced.",
		}),
		dbErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inboxd_worker_db_errors_total",
			Help: "Database errors, by operation.",
		}, []string{"op"}),
		routeLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inboxd_worker_route_concurrency",
			Help: "Most rows of the route in handlers at once in this replica (its concurrency), by event type (other: the default route).",
		}, []string{"event_type"}),
		routeRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inboxd_worker_route_running",
			Help: "Rows of the route in handlers now, by event type (other: the default route).",
		}, []string{"event_type"}),
		routeQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inboxd_worker_route_queued",
			Help: "Rows of the route claimed and waiting for a handler (on ordered routes also those waiting behind the row before them in their key), by event type (other: the default route).",
		}, []string{"event_type"}),
		routePaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inboxd_route_paused",
			Help: "1 while the route is paused (inboxd route pause: no claims of its rows on any replica), else 0, by route (other: the default route).",
		}, []string{"route"}),
		routeBreaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inboxd_route_breaker_state",
			Help: "The route's circuit breaker in this replica: 0 closed, 1 open (no claims until its cool-down ends), 2 half-open (one trial row), by route (other: the default route).",
		}, []string{"route"}),
		routeRateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inboxd_route_rate_limited_total",
			Help: "Claims whose rows of the route were cut by its rate limit (fewer tokens than room), by route (other: the default route).",
		}, []string{"route"}),
		outcomeWriteDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "inboxd_worker_outcome_write_delay_seconds",
			Help: "Time from a handler's return until its outcome is committed: the window in which a crash " +
				"re-runs a handler that already succeeded.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30},
		}),
		heldBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inboxd_worker_held_bytes",
			Help: "Bytes (payloads, keys and headers) of the rows this worker holds claimed and not yet handled.",
		}),
		leaseAtRisk: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_worker_lease_at_risk_total",
			Help: "Rows given back unstarted because their lease could not be renewed in time.",
		}),
		stuckHandlers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_worker_stuck_handlers_total",
			Help: "Handlers still running their route's timeout plus a grace after it ended (they ignore cancellation): " +
				"their leases are no longer renewed, so that their rows are rescued.",
		}),
		poisoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inboxd_worker_poisoned_rows_total",
			Help: "Rows whose data made every claim fail, dead-lettered (or skipped) so that others go on.",
		}),
	}
	m.maintenance = maintenance.NewMetrics(m.dbErrors)
	for _, op := range []string{"claim", "complete", "renew", "start", "rescue", "listen", "stats", "tx", "controls"} {
		m.dbErrors.WithLabelValues(op)
	}
	if reg != nil {
		reg.MustRegister(m.claims, m.claimed, m.handedOff, m.completed, m.fenced, m.handlerDuration, m.panics,
			m.inflight, m.renewals, m.leaseLost, m.dbErrors,
			m.outcomeWriteDelay, m.heldBytes, m.leaseAtRisk, m.poisoned, m.stuckHandlers,
			m.routeLimit, m.routeRunning, m.routeQueued, m.routePaused, m.routeBreaker, m.routeRateLimited)
		reg.MustRegister(m.maintenance.Collectors()...)
	}
	return m
}
