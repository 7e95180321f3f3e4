package ingestcore

import (
	"errors"

	"github.com/inboxd/inboxd/ingest"
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
	BatchWriteDuration prometheus.Observer
	// BatchRows observes the number of rows per written batch.
	BatchRows prometheus.Observer
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
	// Reconnects counts connections to the broker opened again after one
	// was lost (sources that reconnect: RabbitMQ, NATS).
	Reconnects prometheus.Counter
}

// NewKafkaMetrics creates the ingest metrics of a Kafka source and registers
// them with reg (nil registers nothing). They are:
//
//	inboxd_ingest_messages_fetched_total{source_kind}
//	inboxd_ingest_rows_inserted_total{source_kind}
//	inboxd_ingest_duplicates_total{source_kind}
//	inboxd_ingest_rejected_total{source_kind, reason="missing_id|invalid_id|missing_type|invalid_type|oversize|refused"}
//	inboxd_ingest_batch_write_duration_seconds{source_kind} (histogram)
//	inboxd_ingest_batch_rows{source_kind} (histogram)
//	inboxd_ingest_batch_write_errors_total{source_kind}
//	inboxd_ingest_fetch_errors_total{source_kind}
//	inboxd_ingest_offset_commit_errors_total{source_kind} (acknowledgements that failed, for every source)
//	inboxd_ingest_ready{source_kind}
//	inboxd_ingest_consumer_lag{topic, partition} (Kafka)
//	inboxd_ingest_broker_probe_errors_total (Kafka)
//	inboxd_ingest_reconnects_total{source_kind} (sources that reconnect: RabbitMQ, NATS)
//
// source_kind is kafka, amqp or nats: a bounded label. A metric already
// registered with reg (by another source) is shared.
func NewKafkaMetrics(reg prometheus.Registerer) (*Metrics, error) {
	return NewMetrics(reg, ingest.SourceKafka)
}

// NewMetrics builds them for the source kind given.
func NewMetrics(reg prometheus.Registerer, kind string) (*Metrics, error) {
	const ns, sub = "inboxd", "ingest"
	kl := []string{"source_kind"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, kl)
	}
	var (
		fetched  = counter("messages_fetched_total", "Messages fetched from the source.")
		inserted = counter("rows_inserted_total", "Rows inserted into the inbox, rejected rows included.")
		dups     = counter("duplicates_total", "Messages skipped because their (source, event_id) was already in the inbox.")
		rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "rejected_total", Help: "Messages turned into rejected rows, by reason (a redelivered one counts again; the row is stored once)."}, []string{"source_kind", "reason"})
		duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "batch_write_duration_seconds", Help: "Time to write one batch to the inbox (successful writes).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, kl)
		batchRows = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "batch_rows", Help: "Rows per batch written.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14)}, kl)
		writeErrs  = counter("batch_write_errors_total", "Failed attempts at writing a batch (each is retried).")
		fetchErrs  = counter("fetch_errors_total", "Errors returned by the source while fetching.")
		ackErrs    = counter("offset_commit_errors_total", "Acknowledgements (Kafka offset commits) that failed after their batch was written.")
		reconnects = counter("reconnects_total", "Connections to the broker opened again after one was lost.")
		ready      = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "ready", Help: "1 while ingest runs, its last batch write succeeded and the brokers answer."}, kl)
		lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "consumer_lag", Help: "Messages the consumer group has left to read, per partition (high-water mark minus committed offset)."},
			[]string{"topic", "partition"})
		brokerErrs = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "broker_probe_errors_total", Help: "Probes of the brokers (metadata, offsets) that failed."})
	)
	if reg != nil {
		var err error
		fetched = Register(reg, fetched, &err)
		inserted = Register(reg, inserted, &err)
		dups = Register(reg, dups, &err)
		rejected = Register(reg, rejected, &err)
		duration = Register(reg, duration, &err)
		batchRows = Register(reg, batchRows, &err)
		writeErrs = Register(reg, writeErrs, &err)
		fetchErrs = Register(reg, fetchErrs, &err)
		ackErrs = Register(reg, ackErrs, &err)
		reconnects = Register(reg, reconnects, &err)
		ready = Register(reg, ready, &err)
		if kind == ingest.SourceKafka {
			lag = Register(reg, lag, &err)
			brokerErrs = Register(reg, brokerErrs, &err)
		}
		if err != nil {
			return nil, err
		}
	}
	m := &Metrics{
		MessagesFetched:    fetched.WithLabelValues(kind),
		RowsInserted:       inserted.WithLabelValues(kind),
		Duplicates:         dups.WithLabelValues(kind),
		Rejected:           rejected.MustCurryWith(prometheus.Labels{"source_kind": kind}),
		BatchWriteDuration: duration.WithLabelValues(kind),
		BatchRows:          batchRows.WithLabelValues(kind),
		BatchWriteErrors:   writeErrs.WithLabelValues(kind),
		FetchErrors:        fetchErrs.WithLabelValues(kind),
		OffsetCommitErrors: ackErrs.WithLabelValues(kind),
		Reconnects:         reconnects.WithLabelValues(kind),
		Ready:              ready.WithLabelValues(kind),
		Lag:                lag,
		BrokerErrors:       brokerErrs,
	}
	for _, r := range []RejectReason{RejectMissingID, RejectInvalidID, RejectMissingType, RejectInvalidType, RejectOversize, RejectRefused} {
		m.Rejected.WithLabelValues(string(r))
	}
	return m, nil
}

// Register registers c, or returns the identical collector registered
// before. The first error is kept in *errp.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
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
