package outbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/lease"
)

// The relay's defaults, the values a zero Config field takes.
const (
	DefaultBatchSize         = 500
	DefaultBatchBytes        = 16 << 20
	DefaultPollInterval      = 50 * time.Millisecond
	DefaultLease             = 15 * time.Second
	DefaultPublishTimeout    = 5 * time.Second
	DefaultMaxAttempts       = 10
	DefaultRetention         = time.Hour
	DefaultRetentionInterval = time.Minute
	DefaultStatsInterval     = 5 * time.Second
	// DefaultLoops is how many batches a relay publishes at once.
	DefaultLoops = 4
	// DefaultRetryBase and DefaultRetryMax space the retries of a refused
	// message.
	DefaultRetryBase = time.Second
	DefaultRetryMax  = time.Minute
	// DefaultHoldBase and DefaultHoldMax space the retries of a destination
	// that could not be reached.
	DefaultHoldBase = 100 * time.Millisecond
	DefaultHoldMax  = 10 * time.Second
)

// The bounds Validate enforces.
const (
	MaxBatchSize     = 10000
	MinLease         = time.Second
	MinPollInterval  = time.Millisecond
	MaxAttemptsLimit = 1000
	MaxLoops         = driver.OutboxShards
)

// Config configures a Relay. Zero fields take the defaults above.
type Config struct {
	// BatchSize caps the rows read and published at once.
	BatchSize int
	// BatchBytes caps a batch's payloads, headers and keys (a larger row
	// goes alone).
	BatchBytes int
	// PollInterval is how long the relay waits, when it found nothing, before
	// it reads again (after a batch it reads again at once).
	PollInterval time.Duration
	// Lease is a shard lease's length, renewed every Lease/3. A relay that
	// stops (killed, paused, cut off) has its shards taken over by others
	// at most Lease later.
	Lease time.Duration
	// PublishTimeout bounds the publication of one batch; it must be at
	// most Lease/3, and a batch is also cut short where its shards' leases
	// end.
	PublishTimeout time.Duration
	// MaxAttempts is how many refusals a row takes before it goes dead.
	MaxAttempts int
	// Retention is how long published rows are kept; negative keeps them.
	Retention time.Duration
	// RetentionInterval is how often retention runs.
	RetentionInterval time.Duration
	// StatsInterval is how often the table-wide gauges are read.
	StatsInterval time.Duration
	// Loops is how many batches the relay publishes at once, each loop
	// the shards s with s % Loops its own (1 to 32).
	Loops int
	// RelayID names this relay in outbox_shards; empty makes one from the
	// host name, the process id and a random suffix.
	RelayID string
}

func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.Loops == 0 {
		c.Loops = DefaultLoops
	}
	def(&c.PollInterval, DefaultPollInterval)
	def(&c.Lease, DefaultLease)
	def(&c.PublishTimeout, min(DefaultPublishTimeout, lease.ShardStep(c.Lease)))
	def(&c.Retention, DefaultRetention)
	def(&c.RetentionInterval, DefaultRetentionInterval)
	def(&c.StatsInterval, DefaultStatsInterval)
	return c
}

// WithDefaults returns c with the defaults applied.
func (c Config) WithDefaults() Config { return c.withDefaults() }

// Validate reports every setting that cannot work, one line each.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.BatchSize < 1 || c.BatchSize > MaxBatchSize {
		bad("outbox: batch size must be between 1 and %d, got %d", MaxBatchSize, c.BatchSize)
	}
	if c.BatchBytes < 1 {
		bad("outbox: batch bytes must be positive, got %d", c.BatchBytes)
	}
	if c.PollInterval < MinPollInterval {
		bad("outbox: poll interval must be at least %s, got %s", MinPollInterval, c.PollInterval)
	}
	if c.Lease < MinLease {
		bad("outbox: lease must be at least %s, got %s", MinLease, c.Lease)
	}
	if c.PublishTimeout <= 0 || c.PublishTimeout > lease.ShardStep(c.Lease) {
		bad("outbox: publish timeout must be positive and at most a third of the lease (%s), got %s", lease.ShardStep(c.Lease), c.PublishTimeout)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > MaxAttemptsLimit {
		bad("outbox: max attempts must be between 1 and %d, got %d", MaxAttemptsLimit, c.MaxAttempts)
	}
	if c.Loops < 1 || c.Loops > MaxLoops {
		bad("outbox: loops must be between 1 and %d, got %d", MaxLoops, c.Loops)
	}
	if c.RetentionInterval <= 0 {
		bad("outbox: retention interval must be positive, got %s", c.RetentionInterval)
	}
	if c.StatsInterval <= 0 {
		bad("outbox: stats interval must be positive, got %s", c.StatsInterval)
	}
	return errors.Join(errs...)
}

// KafkaCompressions are the codecs the Kafka publisher's compression takes. gzip is
// read by every mainstream client as it is; snappy, lz4 and zstd need a
// codec plug-in in some (kafkajs reads none of them without one).
var KafkaCompressions = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// DefaultKafkaCompression is the Kafka publisher's compression when it is empty:
// gzip, which every mainstream client reads without a plug-in. Measured
// with the relay (cmd/inboxd-bench -run outbox-codecs, 1 KiB JSON events):
// the same rate as none, the relay being bound by PostgreSQL, for about 5
// µs more of its CPU per message, and a fifth of the bytes on the wire
// and on the brokers' disks (docs/outbox.md#configuration).
const DefaultKafkaCompression = "gzip"
