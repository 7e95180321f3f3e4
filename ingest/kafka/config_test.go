package kafka

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/ingest"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	base := Config{Brokers: []string{"k:9092"}, Topics: []string{"t"}, Group: "g"}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no brokers", func(c *Config) { c.Brokers = nil }, "no Kafka brokers"},
		{"no topics", func(c *Config) { c.Topics = nil }, "no Kafka topics"},
		{"no group", func(c *Config) { c.Group = "" }, "no consumer group"},
		{"no id source", func(c *Config) { c.Mapping.EventIDHeaders = []string{} }, "no event id header"},
		{"backoff inverted", func(c *Config) { c.RetryBackoffMin, c.RetryBackoffMax = time.Second, time.Millisecond }, "retry backoff max"},
		{"TLS files without TLS", func(c *Config) { c.TLS.CAFile = "/ca.pem" }, "INBOXD_KAFKA_TLS is false"},
		{"cert without key", func(c *Config) { c.TLS = ingest.TLSConfig{Enabled: true, CertFile: "/c.pem"} }, "set together"},
		{"bad SASL", func(c *Config) { c.SASL.Mechanism = "GSSAPI" }, "SASL mechanism"},
		{"batch timeout too short", func(c *Config) { c.BatchTimeout = ingest.MinBatchTimeout - 1 }, "batch timeout must be at least"},
		{"session timeout too short", func(c *Config) { c.SessionTimeout = ingest.MinSessionTimeout - 1 }, "session timeout must be at least"},
		{"batch too large", func(c *Config) { c.BatchSize = ingest.MaxBatchSize + 1 }, "batch size must be between 1 and"},
		{"batch bytes below the floor", func(c *Config) { c.BatchBytes = ingest.MinSizeLimit - 1 }, "batch bytes must be between"},
		{"batch bytes past the limit", func(c *Config) { c.BatchBytes = ingest.MaxBatchBytes + 1 }, "batch bytes must be between"},
		{"payload past the limit", func(c *Config) { c.Mapping.MaxPayload = ingest.MaxPayloadLimit + 1 }, "max payload must be between"},
		{"headers below the floor", func(c *Config) { c.Mapping.MaxHeaders = ingest.MinSizeLimit - 1 }, "max headers must be between"},
		{"headers past the limit", func(c *Config) { c.Mapping.MaxHeaders = ingest.MaxHeadersLimit + 1 }, "max headers must be between"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := base
			tt.mutate(&c)
			err := c.withDefaults().validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := base.withDefaults().validate(); err != nil {
		t.Errorf("Validate(minimal) = %v", err)
	}
}

func TestDialerErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("secret-looking contents"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := Config{Brokers: []string{"k:9092"}, Topics: []string{"t"}, Group: "g"}
	for name, tls := range map[string]ingest.TLSConfig{
		"missing CA file": {Enabled: true, CAFile: filepath.Join(dir, "absent.pem")},
		"CA file not PEM": {Enabled: true, CAFile: notPEM},
		"bad key pair":    {Enabled: true, CertFile: notPEM, KeyFile: notPEM},
	} {
		c := base
		c.TLS = tls
		_, err := newDialer(c.withDefaults())
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if strings.Contains(err.Error(), "secret-looking") {
			t.Errorf("%s: error shows the file contents: %v", name, err)
		}
		if !strings.Contains(err.Error(), "INBOXD_KAFKA_TLS_") {
			t.Errorf("%s: error does not name the variable: %v", name, err)
		}
	}
	c := base
	c.TLS = ingest.TLSConfig{Enabled: true, ServerName: "kafka.internal", InsecureSkipVerify: true}
	c.SASL = SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p"}
	d, err := newDialer(c.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if d.TLS == nil || d.TLS.ServerName != "kafka.internal" || !d.TLS.InsecureSkipVerify || d.SASLMechanism.Name() != "PLAIN" {
		t.Errorf("dialer TLS %+v, SASL %v", d.TLS, d.SASLMechanism)
	}
}

// The reader buffers BatchBytes' worth of the largest messages accepted, not
// a batch's worth of messages: 500 MiB of 1 MiB payloads used to sit in its
// queue.
func TestReaderQueueIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	// The largest message accepted carries a payload, a key and headers at
	// their bounds: the queue counts all three.
	for _, tt := range []struct {
		batchBytes, maxPayload, maxHeaders, batchSize, want int
	}{
		{16 << 20, 1<<20 - ingest.MaxKeyBytes, 1 << 10, 500, 15},         // 16 MiB of 1 MiB messages, a little short of 16
		{16 << 20, 1 << 10, 1<<20 - ingest.MaxKeyBytes - 1<<10, 500, 16}, // 16 MiB of 1 MiB of headers
		{16 << 20, 1 << 10, 1 << 10, 500, 500},                           // small messages: a batch's worth
		{1 << 10, 1 << 20, 1 << 10, 500, 1},                              // never less than one
		{32 << 20, 4 << 20, 1 << 10, 5, 5},                               // never more than a batch
	} {
		cfg := Config{PipelineConfig: ingest.PipelineConfig{BatchBytes: tt.batchBytes, BatchSize: tt.batchSize,
			Mapping: ingest.MapOptions{MaxPayload: tt.maxPayload, MaxHeaders: tt.maxHeaders}}}
		if got := cfg.queueCapacity(); got != tt.want {
			t.Errorf("queue capacity for %d batch bytes of messages of %d payload and %d header bytes (batch %d) = %d, want %d",
				tt.batchBytes, tt.maxPayload, tt.maxHeaders, tt.batchSize, got, tt.want)
		}
	}
	c := Config{Brokers: []string{"b:1"}, Topics: []string{"t"}, Group: "g"}.withDefaults()
	if got, want := c.queueCapacity(), ingest.DefaultBatchBytes/(ingest.DefaultMaxPayload+ingest.DefaultMaxHeaders+ingest.MaxKeyBytes); got != want {
		t.Errorf("default queue capacity = %d, want %d", got, want)
	}
	// A fetch holds the largest message accepted, and its envelope.
	if mb := c.readerMaxBytes(); mb < ingest.DefaultMaxPayload+ingest.DefaultMaxHeaders+ingest.MaxKeyBytes {
		t.Errorf("reader MaxBytes = %d, below the largest message accepted", mb)
	}
}
