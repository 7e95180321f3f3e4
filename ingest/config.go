package ingest

import (
	"errors"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/handoff"
)

// Defaults used by Config.withDefaults for fields left zero.
const (
	// DefaultBatchSize is the number of messages that closes a batch.
	DefaultBatchSize = 500
	// DefaultBatchTimeout is how long a non-empty batch waits for more messages.
	DefaultBatchTimeout = 50 * time.Millisecond
	// DefaultLinger is how long a batch waits for more messages while the
	// writer is idle.
	DefaultLinger = 2 * time.Millisecond
	// DefaultBatchBytes caps the bytes (payloads, keys and headers) held
	// by one batch.
	DefaultBatchBytes = 16 << 20
	// DefaultMaxPayload is the largest payload stored, in bytes.
	DefaultMaxPayload = 1 << 20
	// DefaultMaxHeaders is the largest total of header names and values a
	// message may carry, in bytes.
	DefaultMaxHeaders = 64 << 10
	// DefaultSessionTimeout is the consumer group session timeout.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultRetryBackoffMin is the first delay before retrying a failed write.
	DefaultRetryBackoffMin = 100 * time.Millisecond
	// DefaultRetryBackoffMax caps the delay between retries of a failed write.
	DefaultRetryBackoffMax = 5 * time.Second
	// DefaultWriteTimeout bounds one attempt at writing a batch.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultCommitTimeout bounds one offset commit.
	DefaultCommitTimeout = 10 * time.Second
	// DefaultCloseTimeout bounds, at shutdown, the final flush and the
	// closing of the reader together.
	DefaultCloseTimeout = 5 * time.Second
	// DefaultLagInterval is how often the brokers are asked for the group's
	// lag (and whether they can be reached).
	DefaultLagInterval = 15 * time.Second
	// DefaultStallTimeout is how long a fetch may wait on a known backlog
	// before Healthy reports the consumer stalled.
	DefaultStallTimeout = 2 * time.Minute
	// DefaultClientID is the client id sent to the brokers.
	DefaultClientID = brokers.DefaultClientID

	// readerHeadroom is added to the largest message accepted (payload,
	// key and headers at their bounds) for the reader's MaxBytes, so that
	// such a message fits in one fetch with the record batch envelope.
	readerHeadroom = 256 << 10
)

// Bounds of the Config fields, checked by Validate; the daemon's INBOXD_*
// variables are checked against the same constants (package config).
const (
	// MaxBatchSize is the largest Config.BatchSize.
	MaxBatchSize = 10000
	// MinBatchTimeout is the shortest Config.BatchTimeout.
	MinBatchTimeout = time.Millisecond
	// MinSessionTimeout is the shortest Config.SessionTimeout.
	MinSessionTimeout = time.Second
	// MinSizeLimit is the smallest Config.BatchBytes, MapOptions.MaxPayload
	// and MapOptions.MaxHeaders accepted: 1 KiB.
	MinSizeLimit = 1 << 10
	// MaxBatchBytes is the largest Config.BatchBytes: 1 GiB.
	MaxBatchBytes = 1 << 30
	// MaxPayloadLimit is the largest MapOptions.MaxPayload accepted: 32
	// MiB. Memory grows with a few times the payload size (a message
	// buffered by the Kafka reader, the batch being written, rows claimed),
	// so gigantic payloads belong in object storage with a reference in the
	// event.
	MaxPayloadLimit = 32 << 20
	// MaxHeadersLimit is the largest MapOptions.MaxHeaders accepted: 1 MiB.
	// Headers are metadata (ids, trace context, content types): data
	// belongs in the payload.
	MaxHeadersLimit = 1 << 20
)

// Config configures a Consumer. Zero fields take the defaults above.
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

	// BatchSize closes a batch when it holds this many messages.
	BatchSize int
	// BatchTimeout closes a non-empty batch this long after its first message.
	BatchTimeout time.Duration
	// Linger closes a non-empty batch once no message has come for this
	// long while the previous batch is already written (default 2ms, at
	// most BatchTimeout): at low rates rows reach the inbox at once, at high
	// rates batches grow while the previous one is written.
	Linger time.Duration
	// BatchBytes closes a batch when its rows' payloads, keys and headers
	// add up to this many bytes. It also bounds what the Kafka reader
	// buffers ahead of the batch: its queue holds BatchBytes over the
	// largest message accepted (Mapping.MaxPayload + Mapping.MaxHeaders +
	// MaxKeyBytes) messages (at least one, at most BatchSize), so memory
	// stays bounded in bytes whatever the message sizes.
	BatchBytes int

	// Mapping controls how messages become rows.
	Mapping MapOptions

	// RetryBackoffMin is the first delay before retrying a failed write.
	RetryBackoffMin time.Duration
	// RetryBackoffMax caps the delay between retries of a failed write or
	// fetch; it is also kafka-go's delay before rejoining the group after a
	// failed join.
	RetryBackoffMax time.Duration
	// WriteTimeout bounds one attempt at writing a batch.
	WriteTimeout time.Duration
	// CommitTimeout bounds one offset commit.
	CommitTimeout time.Duration
	// CloseTimeout bounds, at shutdown, the final flush and the closing of
	// the reader together: Run returns within CloseTimeout of its context's
	// cancellation.
	CloseTimeout time.Duration
	// handOff, when set, is the worker pool of this process, to which the
	// batches' rows are handed as they are stored while it has idle
	// handlers (the Inboxd's, set from source.Env). nil: every row waits
	// for a claim.
	handOff handoff.HandOff
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
	TLS TLSConfig
	// SASL configures SASL authentication to the brokers.
	SASL SASLConfig
}

// TLSConfig configures TLS to the brokers. Its fields are those of the
// rules' own type (internal/brokers.TLS), which it converts to.
type TLSConfig struct {
	// Enabled turns TLS on.
	Enabled bool
	// CAFile is a PEM bundle of CAs to trust; empty uses the system pool.
	CAFile string
	// CertFile is the client certificate (PEM) for mutual TLS.
	CertFile string
	// KeyFile is the client key (PEM) for mutual TLS.
	KeyFile string
	// ServerName overrides the name checked in the broker's certificate.
	ServerName string
	// InsecureSkipVerify disables certificate verification (tests only).
	InsecureSkipVerify bool
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
func (s SASLConfig) GoString() string { return "ingest.SASLConfig{" + s.String() + "}" }

// WithDefaults returns c with every zero field set to its default, as New
// applies them: what a Consumer made from c runs with.
func (c Config) WithDefaults() Config { return c.withDefaults() }

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	setDur(&c.BatchTimeout, DefaultBatchTimeout)
	setDur(&c.Linger, DefaultLinger)
	setDur(&c.SessionTimeout, DefaultSessionTimeout)
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = min(c.SessionTimeout/3, 3*time.Second)
	}
	setDur(&c.RebalanceTimeout, c.SessionTimeout)
	setDur(&c.RetryBackoffMin, DefaultRetryBackoffMin)
	setDur(&c.RetryBackoffMax, DefaultRetryBackoffMax)
	setDur(&c.WriteTimeout, DefaultWriteTimeout)
	setDur(&c.CommitTimeout, DefaultCommitTimeout)
	setDur(&c.CloseTimeout, DefaultCloseTimeout)
	setDur(&c.StallTimeout, DefaultStallTimeout)
	setDur(&c.LagInterval, DefaultLagInterval)
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	c.Mapping = c.Mapping.withDefaults()
	return c
}

// Validate reports every setting that cannot work, one line each.
func (c Config) Validate() error {
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
	if c.BatchSize < 1 || c.BatchSize > MaxBatchSize {
		bad("ingest: batch size must be between 1 and %d, got %d", MaxBatchSize, c.BatchSize)
	}
	if c.BatchBytes < MinSizeLimit || c.BatchBytes > MaxBatchBytes {
		bad("ingest: batch bytes must be between %d and %d, got %d", MinSizeLimit, MaxBatchBytes, c.BatchBytes)
	}
	if c.Mapping.MaxPayload < MinSizeLimit || c.Mapping.MaxPayload > MaxPayloadLimit {
		bad("ingest: max payload must be between %d and %d bytes, got %d", MinSizeLimit, MaxPayloadLimit, c.Mapping.MaxPayload)
	}
	if c.Mapping.MaxHeaders < MinSizeLimit || c.Mapping.MaxHeaders > MaxHeadersLimit {
		bad("ingest: max headers must be between %d and %d bytes, got %d", MinSizeLimit, MaxHeadersLimit, c.Mapping.MaxHeaders)
	}
	if len(c.Mapping.EventIDHeaders) == 0 && c.Mapping.EventIDJSONField == "" {
		bad("ingest: no event id header or JSON field (INBOXD_EVENT_ID_HEADERS)")
	}
	if len(c.Mapping.EventTypeHeaders) == 0 && c.Mapping.EventTypeJSONField == "" {
		bad("ingest: no event type header or JSON field (INBOXD_EVENT_TYPE_HEADERS)")
	}
	if c.BatchTimeout < MinBatchTimeout {
		bad("ingest: batch timeout must be at least %s, got %s", MinBatchTimeout, c.BatchTimeout)
	}
	if c.SessionTimeout < MinSessionTimeout {
		bad("ingest: session timeout must be at least %s, got %s", MinSessionTimeout, c.SessionTimeout)
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
		{"commit timeout", c.CommitTimeout}, {"close timeout", c.CloseTimeout},
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
