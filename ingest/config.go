package ingest

import (
	"time"

	"github.com/inboxd/inboxd/internal/brokers"
)

// Defaults of the sources' settings, taken by the fields left zero.
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
)

// Bounds of the sources' settings, checked when a source is opened; the daemon's INBOXD_*
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
