package ingest

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the ingest metrics. Build them with NewMetrics.
type Metrics struct {
	// MessagesFetched counts messages returned by FetchMessage.
	MessagesFetched prometheus.Counter
	// RowsInserted counts rows inserted into the inbox (accepted and
	// rejected alike).
	RowsInserted prometheus.Counter
	// Duplicates counts batch rows skipped because their (source, event_id)
	// was already in the inbox.
	Duplicates prometheus.Counter
	// Rejected counts messages turned into rejected rows, by reason.
	Rejected *prometheus.CounterVec
	// BatchWriteDuration observes successful batch writes.
	BatchWriteDuration prometheus.Histogram
	// BatchRows observes the number of rows per written batch.
	BatchRows prometheus.Histogram
	// BatchWriteErrors counts failed attempts at writing a batch.
	BatchWriteErrors prometheus.Counter
	// FetchErrors counts errors returned by FetchMessage.
	FetchErrors prometheus.Counter
	// OffsetCommitErrors counts offset commits that failed after their batch
	// was written.
	OffsetCommitErrors prometheus.Counter
	// Ready is 1 while ingest runs, its last write succeeded and the brokers
	// answered its last probe, else 0.
	Ready prometheus.Gauge
	// Lag is the consumer group's lag per partition, in messages: the
	// high-water mark minus the committed offset.
	Lag *prometheus.GaugeVec
	// BrokerErrors counts probes of the brokers that failed.
	BrokerErrors prometheus.Counter
}

// NewMetrics creates the ingest metrics and registers them with reg (nil
// registers nothing). They are:
//
//	inboxd_ingest_messages_fetched_total
//	inboxd_ingest_rows_inserted_total
//	inboxd_ingest_duplicates_total
//	inboxd_ingest_rejected_total{reason="missing_id|invalid_id|missing_type|invalid_type|oversize|refused"}
//	inboxd_ingest_batch_write_duration_seconds (histogram)
//	inboxd_ingest_batch_rows (histogram)
//	inboxd_ingest_batch_write_errors_total
//	inboxd_ingest_fetch_errors_total
//	inboxd_ingest_offset_commit_errors_total
//	inboxd_ingest_ready
//	inboxd_ingest_consumer_lag{topic, partition}
//	inboxd_ingest_broker_probe_errors_total
//
// A metric already registered with reg (by another Consumer) is shared.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "inboxd", "ingest"
	m := &Metrics{
		MessagesFetched: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "messages_fetched_total", Help: "Kafka messages fetched."}),
		RowsInserted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "rows_inserted_total", Help: "Rows inserted into the inbox, rejected rows included."}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "duplicates_total", Help: "Messages skipped because their (source, event_id) was already in the inbox."}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "rejected_total", Help: "Messages turned into rejected rows, by reason (a redelivered one counts again; the row is stored once)."}, []string{"reason"}),
		BatchWriteDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "batch_write_duration_seconds", Help: "Time to write one batch to the inbox (successful writes).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		BatchRows: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "batch_rows", Help: "Rows per batch written.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		BatchWriteErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "batch_write_errors_total", Help: "Failed attempts at writing a batch (each is retried)."}),
		FetchErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "fetch_errors_total", Help: "Errors returned by the Kafka reader while fetching."}),
		OffsetCommitErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "offset_commit_errors_total", Help: "Offset commits that failed after their batch was written."}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "ready", Help: "1 while ingest runs, its last batch write succeeded and the brokers answer."}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "consumer_lag", Help: "Messages the consumer group has left to read, per partition (high-water mark minus committed offset)."},
			[]string{"topic", "partition"}),
		BrokerErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "broker_probe_errors_total", Help: "Probes of the brokers (metadata, offsets) that failed."}),
	}
	for _, r := range []RejectReason{RejectMissingID, RejectInvalidID, RejectMissingType, RejectInvalidType, RejectOversize, RejectRefused} {
		m.Rejected.WithLabelValues(string(r))
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.MessagesFetched = register(reg, m.MessagesFetched, &err)
	m.RowsInserted = register(reg, m.RowsInserted, &err)
	m.Duplicates = register(reg, m.Duplicates, &err)
	m.Rejected = register(reg, m.Rejected, &err)
	m.BatchWriteDuration = register(reg, m.BatchWriteDuration, &err)
	m.BatchRows = register(reg, m.BatchRows, &err)
	m.BatchWriteErrors = register(reg, m.BatchWriteErrors, &err)
	m.FetchErrors = register(reg, m.FetchErrors, &err)
	m.OffsetCommitErrors = register(reg, m.OffsetCommitErrors, &err)
	m.Ready = register(reg, m.Ready, &err)
	m.Lag = register(reg, m.Lag, &err)
	m.BrokerErrors = register(reg, m.BrokerErrors, &err)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the identical collector registered
// before. The first error is kept in *errp.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	if *errp == nil {
		*errp = err
	}
	return c
}
