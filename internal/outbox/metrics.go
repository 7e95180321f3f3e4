package outbox

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxDestinationLabels bounds the destination label: the first destinations
// seen get their own series, later ones share "other".
const maxDestinationLabels = 100

type metrics struct {
	pending    prometheus.Gauge
	oldest     prometheus.Gauge
	dead       prometheus.Gauge
	published  *prometheus.CounterVec
	failed     *prometheus.CounterVec
	deadTotal  *prometheus.CounterVec
	latency    prometheus.Histogram
	owned      prometheus.Gauge
	leaseLost  prometheus.Counter
	fenced     prometheus.Counter
	deleted    prometheus.Counter
	brokerUp   *prometheus.GaugeVec
	labelsMu   sync.Mutex
	labelsSeen map[string]bool
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_outbox_pending_rows",
			Help: "Pending rows in the outbox table (table-wide: take the max across replicas)."}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_outbox_oldest_pending_seconds",
			Help: "Age of the oldest pending outbox row; 0 when none (table-wide)."}),
		dead: prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_outbox_dead_rows",
			Help: "Dead rows in the outbox table (table-wide)."}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_outbox_published_total",
			Help: "Outbox messages the broker acknowledged, re-publications included."}, []string{"destination"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_outbox_failed_total",
			Help: "Outbox publications that failed: reason=refused (the broker's verdict; counts an attempt) or unavailable (not reached; the destination is held back)."},
			[]string{"destination", "reason"}),
		deadTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxd_outbox_dead_total",
			Help: "Outbox rows that went dead after their attempts."}, []string{"destination"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "inboxd_outbox_publish_latency_seconds",
			Help:    "From an outbox row's created_at (its transaction's start) to the broker's acknowledgement.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "inboxd_outbox_shards_owned",
			Help: "Outbox shards this relay holds a lease on (of 32)."}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_outbox_lease_lost_total",
			Help: "Outbox shard leases this relay lost before renewing them."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_outbox_fenced_total",
			Help: "Outbox row writes refused because the shard's lease was no longer this relay's."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxd_outbox_deleted_total",
			Help: "Published outbox rows deleted by retention."}),
		brokerUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "inboxd_outbox_broker_up",
			Help: "1 when the outbox's publisher of the kind (kafka, amqp, nats) is connected."}, []string{"kind"}),
		labelsSeen: map[string]bool{},
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.pending, m.oldest, m.dead, m.published, m.failed, m.deadTotal,
			m.latency, m.owned, m.leaseLost, m.fenced, m.deleted, m.brokerUp} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// destination is the label value of destination d: d itself for the first
// maxDestinationLabels destinations, "other" after.
func (m *metrics) destination(d string) string {
	m.labelsMu.Lock()
	defer m.labelsMu.Unlock()
	if m.labelsSeen[d] {
		return d
	}
	if len(m.labelsSeen) >= maxDestinationLabels {
		return "other"
	}
	m.labelsSeen[d] = true
	return d
}
