package kafka

import (
	"errors"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/handoff"
	"github.com/inboxd/inboxd/internal/ingestcore"

	"github.com/inboxd/inboxd/internal/brokers"
)

// Config configures the Kafka source (New). Zero fields take the defaults
// of package ingest.
type Config struct {
	// Brokers lists the bootstrap brokers as host:port.
	Brokers []string
	// Topics lists the topics consumed; each becomes the source of its rows.
	Topics []string
	// Group is the consumer group id.
	Group string
	// ClientID identifies this daemon to the brokers.
	ClientID string
	// StartFromLatest starts a group that has no committed offset at the end
	// of each partition instead of the beginning.
	StartFromLatest bool
	// SessionTimeout is how long the group waits for a member that stopped
	// heartbeating (for example one killed without leaving the group).
	SessionTimeout time.Duration
	// HeartbeatInterval is how often the member heartbeats, and so how fast
	// it notices a rebalance. Zero means SessionTimeout/3, at most 3s.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the coordinator waits for members to
	// rejoin during a rebalance. Zero means SessionTimeout.
	RebalanceTimeout time.Duration

	// PipelineConfig is the batching, mapping and writes, as every source
	// has them (its AckTimeout bounds one offset commit). For Kafka,
	// BatchBytes also bounds what the reader buffers ahead of the batch:
	// its queue holds BatchBytes over the largest message accepted
	// (Mapping.MaxPayload + Mapping.MaxHeaders + MaxKeyBytes) messages (at
	// least one, at most BatchSize), so memory stays bounded in bytes
	// whatever the message sizes; RetryBackoffMax is also kafka-go's delay
	// before rejoining the group after a failed join.
	ingest.PipelineConfig

	// StallTimeout is how long a fetch may wait while messages are known to
	// be waiting before Healthy reports an error.
	StallTimeout time.Duration

	// LagInterval is how often the brokers are asked for the consumer
	// group's lag per partition; while they do not answer, ingest is not
	// ready.
	LagInterval time.Duration
	// DedupWindow is how long processed rows are kept (INBOXD_RETENTION).
	// When set, Run warns about every topic whose retention.ms is longer:
	// deduplication holds only while a row exists. Zero skips the check.
	DedupWindow time.Duration

	// TLS configures TLS to the brokers.
	TLS ingest.TLSConfig
	// SASL configures SASL authentication to the brokers.
	SASL SASLConfig

	// handOff is the hand-off to the local workers the Inboxd gives
	// the source when it opens it (source.Env.HandOff); nil: none.
	handOff handoff.HandOff
}

// SASLConfig configures SASL authentication to the brokers.
type SASLConfig struct {
	// Mechanism is empty (no SASL), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	// (internal/brokers.SASLMechanisms).
	Mechanism string
	// Username is the SASL user name.
	Username string
	// Password is the SASL password. It is never logged or printed.
	Password string
}

// String describes the SASL settings without the password.
func (s SASLConfig) String() string { return brokers.SASL(s).String() }

// GoString describes the SASL settings without the password, for %#v.
func (s SASLConfig) GoString() string { return "kafka.SASLConfig{" + s.String() + "}" }

// WithDefaults returns c with every zero field set to its default, as New
// applies them: what the source made from c runs with.
func (c Config) WithDefaults() Config { return c.withDefaults() }

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	c.PipelineConfig = ingestcore.PipelineDefaults(c.PipelineConfig)
	setDur(&c.SessionTimeout, ingest.DefaultSessionTimeout)
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = min(c.SessionTimeout/3, 3*time.Second)
	}
	setDur(&c.RebalanceTimeout, c.SessionTimeout)
	setDur(&c.StallTimeout, ingest.DefaultStallTimeout)
	setDur(&c.LagInterval, ingest.DefaultLagInterval)
	if c.ClientID == "" {
		c.ClientID = ingest.DefaultClientID
	}
	return c
}

// validate reports every setting that cannot work, one line each.
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Brokers) == 0 {
		bad("ingest: no Kafka brokers (INBOXD_KAFKA_BROKERS)")
	}
	if len(c.Topics) == 0 {
		bad("ingest: no Kafka topics (INBOXD_KAFKA_TOPICS)")
	}
	if c.Group == "" {
		bad("ingest: no consumer group (INBOXD_KAFKA_GROUP)")
	}
	if c.BatchSize < 1 || c.BatchSize > ingest.MaxBatchSize {
		bad("ingest: batch size must be between 1 and %d, got %d", ingest.MaxBatchSize, c.BatchSize)
	}
	if c.BatchBytes < ingest.MinSizeLimit || c.BatchBytes > ingest.MaxBatchBytes {
		bad("ingest: batch bytes must be between %d and %d, got %d", ingest.MinSizeLimit, ingest.MaxBatchBytes, c.BatchBytes)
	}
	if c.Mapping.MaxPayload < ingest.MinSizeLimit || c.Mapping.MaxPayload > ingest.MaxPayloadLimit {
		bad("ingest: max payload must be between %d and %d bytes, got %d", ingest.MinSizeLimit, ingest.MaxPayloadLimit, c.Mapping.MaxPayload)
	}
	if c.Mapping.MaxHeaders < ingest.MinSizeLimit || c.Mapping.MaxHeaders > ingest.MaxHeadersLimit {
		bad("ingest: max headers must be between %d and %d bytes, got %d", ingest.MinSizeLimit, ingest.MaxHeadersLimit, c.Mapping.MaxHeaders)
	}
	if len(c.Mapping.EventIDHeaders) == 0 && c.Mapping.EventIDJSONField == "" {
		bad("ingest: no event id header or JSON field (INBOXD_EVENT_ID_HEADERS)")
	}
	if len(c.Mapping.EventTypeHeaders) == 0 && c.Mapping.EventTypeJSONField == "" {
		bad("ingest: no event type header or JSON field (INBOXD_EVENT_TYPE_HEADERS)")
	}
	if c.BatchTimeout < ingest.MinBatchTimeout {
		bad("ingest: batch timeout must be at least %s, got %s", ingest.MinBatchTimeout, c.BatchTimeout)
	}
	if c.SessionTimeout < ingest.MinSessionTimeout {
		bad("ingest: session timeout must be at least %s, got %s", ingest.MinSessionTimeout, c.SessionTimeout)
	}
	if c.RetryBackoffMax < c.RetryBackoffMin {
		bad("ingest: retry backoff max (%s) is below min (%s)", c.RetryBackoffMax, c.RetryBackoffMin)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"linger", c.Linger}, {"heartbeat interval", c.HeartbeatInterval}, {"rebalance timeout", c.RebalanceTimeout},
		{"retry backoff min", c.RetryBackoffMin}, {"write timeout", c.WriteTimeout},
		{"commit timeout", c.AckTimeout}, {"close timeout", c.CloseTimeout},
		{"stall timeout", c.StallTimeout}, {"lag interval", c.LagInterval},
	} {
		if d.d <= 0 {
			bad("ingest: %s must be positive, got %s", d.name, d.d)
		}
	}
	if brokers.TLS(c.TLS).FilesWithoutTLS() {
		bad("ingest: INBOXD_KAFKA_TLS_CA_FILE, _CERT_FILE or _KEY_FILE is set but INBOXD_KAFKA_TLS is false")
	}
	if brokers.TLS(c.TLS).HalfKeyPair() {
		bad("ingest: INBOXD_KAFKA_TLS_CERT_FILE and INBOXD_KAFKA_TLS_KEY_FILE must be set together")
	}
	if !brokers.ValidSASLMechanism(c.SASL.Mechanism) {
		bad("ingest: SASL mechanism must be %s, got %q", brokers.SASLMechanismsText, c.SASL.Mechanism)
	}
	return errors.Join(errs...)
}
