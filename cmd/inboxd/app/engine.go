package app

import (
	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/ingest/amqp"
	"github.com/inboxd/inboxd/ingest/kafka"
	"github.com/inboxd/inboxd/ingest/nats"
	"github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/ingest/webhook"
	"github.com/inboxd/inboxd/internal/opfiles/webhookfile"
	"github.com/inboxd/inboxd/worker"
)

// workerConfig translates the daemon's configuration into the worker
// pool's. The engine packages know nothing of environment variables.
func workerConfig(c config.Config) worker.Config {
	return worker.Config{
		Workers:          c.Workers,
		ClaimBatch:       c.ClaimBatch,
		ClaimBytes:       c.ClaimBytes,
		Prefetch:         c.Prefetch,
		MaxAttempts:      c.MaxAttempts,
		Lease:            c.Lease,
		StatementTimeout: c.StatementTimeout,
		RetryPolicy:      worker.ExponentialBackoff{Base: c.BackoffBase, Max: c.BackoffMax},
		MaxRetryDelay:    c.BackoffMax,
		PollInterval:     c.PollInterval,
		StatsInterval:    c.StatsInterval,
		StaleAfter:       c.StaleAfter,
		ShutdownTimeout:  c.ShutdownTimeout,
	}
}

// retentionConfig translates the daemon's configuration into retention's.
func retentionConfig(c config.Config) worker.RetentionConfig {
	return worker.RetentionConfig{
		Processed:        c.Retention,
		Failed:           c.DeadRetention,
		Interval:         c.RetentionInterval,
		StatementTimeout: c.StatementTimeout,
	}
}

// ingestConfig translates the daemon's configuration into the Kafka
// consumer's. Settings that have no INBOXD_* variable keep their defaults.
func ingestConfig(c config.Config) kafka.Config {
	return kafka.Config{
		Brokers:         c.KafkaBrokers,
		Topics:          c.KafkaTopics,
		Group:           c.KafkaGroup,
		ClientID:        c.KafkaClientID,
		StartFromLatest: c.KafkaStartOffset == "last",
		SessionTimeout:  c.KafkaSessionTimeout,
		DedupWindow:     c.Retention,
		PipelineConfig: ingest.PipelineConfig{
			BatchSize:    c.IngestBatchSize,
			BatchTimeout: c.IngestBatchTimeout,
			BatchBytes:   c.IngestBatchBytes,
			Mapping: ingest.MapOptions{
				EventIDHeaders:     c.EventIDHeaders,
				EventTypeHeaders:   c.EventTypeHeaders,
				EventIDJSONField:   c.EventIDJSONField,
				EventTypeJSONField: c.EventTypeJSONField,
				MaxPayload:         c.MaxPayload,
				MaxHeaders:         c.MaxHeaders,
			},
		},
		TLS: ingest.TLSConfig{
			Enabled:            c.KafkaTLS,
			CAFile:             c.KafkaTLSCAFile,
			CertFile:           c.KafkaTLSCertFile,
			KeyFile:            c.KafkaTLSKeyFile,
			ServerName:         c.KafkaTLSServerName,
			InsecureSkipVerify: c.KafkaTLSInsecureSkipVerify,
		},
		SASL: kafka.SASLConfig{
			Mechanism: c.KafkaSASLMechanism,
			Username:  c.KafkaSASLUsername,
			Password:  c.KafkaSASLPassword,
		},
	}
}

// amqpConfig translates the daemon's configuration into the RabbitMQ
// source's; nil when INBOXD_AMQP_URL is not set.
func amqpConfig(c config.Config) *amqp.Config {
	if !c.AMQPEnabled() {
		return nil
	}
	k := ingestConfig(c) // one translation of the batching and mapping settings
	return &amqp.Config{
		URL:      c.AMQPURL,
		Queues:   c.AMQPQueues,
		Prefetch: c.AMQPPrefetch,
		TLS:      amqpTLS(c),
		Pipeline: ingest.PipelineConfig{BatchSize: k.BatchSize, BatchTimeout: k.BatchTimeout, BatchBytes: k.BatchBytes,
			Mapping: k.Mapping}, // the batching and mapping settings, not Kafka's timeouts
	}
}

// natsConfig translates the daemon's configuration into the NATS JetStream
// source's; nil when INBOXD_NATS_URL is not set.
func natsConfig(c config.Config) *nats.Config {
	if !c.NATSEnabled() {
		return nil
	}
	k := ingestConfig(c) // one translation of the batching and mapping settings
	return &nats.Config{
		URL:       c.NATSURL,
		CredsFile: c.NATSCredsFile,
		Streams:   c.NATSStreams,
		Consumer:  c.NATSConsumer,
		Subjects:  c.NATSSubjects,
		TLS:       natsTLS(c),
		Pipeline: ingest.PipelineConfig{BatchSize: k.BatchSize, BatchTimeout: k.BatchTimeout, BatchBytes: k.BatchBytes,
			Mapping: k.Mapping}, // the batching and mapping settings, not Kafka's timeouts
	}
}

// webhookConfig translates the daemon's configuration into the webhook
// source's, reading the sources file and its secret files; nil when
// INBOXD_WEBHOOK_ADDR is not set.
func webhookConfig(c config.Config) (*webhook.Config, error) {
	if !c.WebhookEnabled() {
		return nil, nil
	}
	sources, err := webhookfile.Load(c.WebhookSources, true)
	if err != nil {
		return nil, err
	}
	k := ingestConfig(c) // one translation of the batching and mapping settings
	return &webhook.Config{
		Addr:         c.WebhookAddr,
		Sources:      sources,
		TLSCertFile:  c.WebhookTLSCertFile,
		TLSKeyFile:   c.WebhookTLSKeyFile,
		WriteTimeout: c.WebhookWriteTimeout,
		MaxRequests:  c.WebhookMaxRequests,
		BodyBudget:   c.WebhookBodyBudget,
		MinBodyRate:  c.WebhookMinBodyRate,
		Pipeline: ingest.PipelineConfig{BatchSize: k.BatchSize, BatchTimeout: k.BatchTimeout, BatchBytes: k.BatchBytes,
			Mapping: k.Mapping}, // the batching and mapping settings, not Kafka's timeouts
	}, nil
}

// outboxConfig translates the daemon's configuration into the outbox
// relay's; nil without INBOXD_OUTBOX=true. The brokers published to are
// the sources' (their connection settings alone: a broker without topics,
// queues or streams publishes only).
func outboxConfig(c config.Config) *inboxd.OutboxConfig {
	if !c.Outbox {
		return nil
	}
	o := &inboxd.OutboxConfig{
		BatchSize:      c.OutboxBatchSize,
		PollInterval:   c.OutboxPollInterval,
		Lease:          c.OutboxLease,
		PublishTimeout: c.OutboxPublishTimeout,
		MaxAttempts:    c.OutboxMaxAttempts,
		Retention:      c.OutboxRetention,
	}
	if len(c.KafkaBrokers) > 0 {
		o.Publishers = append(o.Publishers, kafka.Publisher(ingestConfig(c), c.OutboxKafkaCompression))
	}
	if c.AMQPURL != "" {
		o.Publishers = append(o.Publishers, amqp.Publisher(amqp.Config{URL: c.AMQPURL, TLS: amqpTLS(c)}))
	}
	if c.NATSURL != "" {
		o.Publishers = append(o.Publishers, nats.Publisher(nats.Config{URL: c.NATSURL, CredsFile: c.NATSCredsFile,
			TLS: natsTLS(c)}))
	}
	return o
}

// amqpTLS is the TLS configuration of RabbitMQ connections, source and
// publisher alike.
func amqpTLS(c config.Config) ingest.TLSConfig {
	return ingest.TLSConfig{CAFile: c.AMQPTLSCAFile, CertFile: c.AMQPTLSCertFile, KeyFile: c.AMQPTLSKeyFile}
}

// natsTLS is the TLS configuration of NATS connections, source and
// publisher alike.
func natsTLS(c config.Config) ingest.TLSConfig {
	return ingest.TLSConfig{CAFile: c.NATSTLSCAFile, CertFile: c.NATSTLSCertFile, KeyFile: c.NATSTLSKeyFile}
}

// sourcesToRun is the sources cfg configures, for inboxd.Config.Sources: the
// Kafka consumer, the RabbitMQ, NATS JetStream and webhook sources, in this
// order (the order their errors and readiness are reported in).
func sourcesToRun(cfg config.Config) ([]source.Source, error) {
	var out []source.Source
	if cfg.IngestEnabled() {
		out = append(out, kafka.New(ingestConfig(cfg)))
	}
	if c := amqpConfig(cfg); c != nil {
		out = append(out, amqp.New(*c))
	}
	if c := natsConfig(cfg); c != nil {
		out = append(out, nats.New(*c))
	}
	c, err := webhookConfig(cfg)
	if err != nil {
		return nil, err
	}
	if c != nil {
		out = append(out, webhook.New(*c))
	}
	return out, nil
}

// remapSources are the sources whose remap rules `inboxd requeue --status
// rejected` maps rejected rows by: every kind, whether cfg runs it or
// not (a row outlives the source that stored it), with the brokers'
// mapping settings and hooks, the webhook sources as the sources file
// gives them (nil: no file).
func remapSources(cfg config.Config, hooks []webhook.SourceConfig) []source.Source {
	k := ingestConfig(cfg)
	pipe := ingest.PipelineConfig{Mapping: k.Mapping}
	return []source.Source{
		kafka.New(k),
		amqp.New(amqp.Config{Pipeline: pipe}),
		nats.New(nats.Config{Pipeline: pipe}),
		webhook.New(webhook.Config{Sources: hooks, Pipeline: pipe}),
	}
}
