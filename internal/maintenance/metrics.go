package maintenance

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/internal/driver/status"
)

// Metrics are the Prometheus metrics the pool's maintenance services write
// (retention has its own). The engine's metrics hold them and register
// them with theirs (Collectors).
type Metrics struct {
	// DBErrors is the engine's count of database errors, by operation
	// (op "rescue", "stats", "controls" here).
	DBErrors *prometheus.CounterVec
	// Rescued counts the rows of expired leases rescued, by the status
	// they went to.
	Rescued *prometheus.CounterVec
	// Rows is the live rows by status.
	Rows *prometheus.GaugeVec
	// OldestReady is the age of the oldest due received row.
	OldestReady prometheus.Gauge
	// OldestReceived is the age of the oldest received row.
	OldestReceived prometheus.Gauge
	// StaleRows is the received rows older than the stale age.
	StaleRows prometheus.Gauge
	// BlockedKeys is the keys held back by a dead row.
	BlockedKeys prometheus.Gauge
	// Tally counts the pool's outcomes per route and minute for the
	// rollup (rollup.go); not a Prometheus collector.
	Tally *Tally
}

// NewMetrics returns the maintenance services' metrics, unregistered,
// counting database errors on dbErrors (the engine's).
func NewMetrics(dbErrors *prometheus.CounterVec) *Metrics {
	m := &Metrics{
		DBErrors: dbErrors,
		Tally:    NewTally(),
		Rescued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inboxd_worker_rescued_total",
			Help: "Rows with an expired lease returned to received or sent to dead.",
		}, []string{"status"}),
		Rows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inboxd_inbox_rows",
			Help: "Inbox rows by status (received, processing, dead, rejected; processed rows are never counted), " +
				"refreshed every stats interval. Take max() across replicas.",
		}, []string{"status"}),
		OldestReady: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inboxd_inbox_oldest_ready_age_seconds",
			Help: "How long the oldest due received row has waited since its available_at: are workers keeping up?",
		}),
		OldestReceived: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inboxd_inbox_oldest_received_age_seconds",
			Help: "Age by received_at of the oldest received row, rows waiting in backoff included.",
		}),
		StaleRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inboxd_inbox_stale_rows",
			Help: "Received rows (waiting in backoff included) older than INBOXD_STALE_AFTER by received_at.",
		}),
		BlockedKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inboxd_ordered_blocked_keys",
			Help: "Keys of ordered routes held back by a dead row (on_dead: block) until it is requeued or discarded.",
		}),
	}
	for _, st := range status.Live {
		m.Rows.WithLabelValues(string(st))
	}
	for _, st := range []status.Status{status.Received, status.Dead} {
		m.Rescued.WithLabelValues(string(st))
	}
	return m
}

// Collectors are the metrics to register, DBErrors aside (its owner's).
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Rescued, m.Rows, m.OldestReady, m.OldestReceived, m.StaleRows, m.BlockedKeys}
}
