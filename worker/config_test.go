package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// A zero Config takes the Default* constants, and is valid.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.WithDefaults()
	policy, ok := c.RetryPolicy.(ExponentialBackoff)
	if c.Workers != DefaultWorkers || c.ClaimBatch != DefaultClaimBatch || c.ClaimBytes != DefaultClaimBytes ||
		c.MaxAttempts != DefaultMaxAttempts || c.Lease != DefaultLease || c.StatementTimeout != DefaultStatementTimeout ||
		!ok || policy.Base != DefaultBackoffBase || policy.Max != DefaultBackoffMax || c.MaxRetryDelay != DefaultBackoffMax ||
		c.PollInterval != DefaultPollInterval || c.StatsInterval != DefaultStatsInterval || c.StaleAfter != DefaultStaleAfter ||
		c.ShutdownTimeout != DefaultShutdownTimeout {
		t.Errorf("defaults = %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Errorf("the defaults are not valid: %v", err)
	}
	r := RetentionConfig{}.WithDefaults()
	if r.Processed != DefaultRetention || r.Interval != DefaultRetentionInterval || r.StatementTimeout != DefaultStatementTimeout || r.Failed != 0 {
		t.Errorf("retention defaults = %+v", r)
	}
	if err := r.validate(); err != nil {
		t.Errorf("the retention defaults are not valid: %v", err)
	}
}

// Each bound accepts its limit and refuses one past it, with one line
// naming the setting.
func TestConfigBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		mutate func(*Config)
		want   string // "" when valid
	}{
		{"workers at the limit", func(c *Config) { c.Workers = handlers.MaxConcurrency }, ""},
		{"workers past the limit", func(c *Config) { c.Workers = handlers.MaxConcurrency + 1 }, "workers must be between 1 and"},
		{"max attempts at the limit", func(c *Config) { c.MaxAttempts = handlers.MaxAttemptsLimit }, ""},
		{"max attempts past the limit", func(c *Config) { c.MaxAttempts = handlers.MaxAttemptsLimit + 1 }, "max attempts must be between 1 and"},
		{"claim batch past the limit", func(c *Config) { c.ClaimBatch = MaxClaimBatch + 1 }, "claim batch must be between 1 and"},
		{"claim bytes below the floor", func(c *Config) { c.ClaimBytes = MinClaimBytes - 1 }, "claim bytes must be between"},
		{"claim bytes past the limit", func(c *Config) { c.ClaimBytes = MaxClaimBytes + 1 }, "claim bytes must be between"},
		{"prefetch past the limit", func(c *Config) { c.Prefetch = MaxPrefetch + 1 }, "prefetch must be at most"},
		{"poll interval below the floor", func(c *Config) { c.PollInterval = MinPollInterval - 1 }, "poll interval must be between"},
		{"poll interval past the limit", func(c *Config) { c.PollInterval = MaxPollInterval + 1 }, "poll interval must be between"},
		{"stats interval below the floor", func(c *Config) { c.StatsInterval = MinStatsInterval - 1 }, "stats interval must be at least"},
		{"stale after below the floor", func(c *Config) { c.StaleAfter = MinStaleAfter - 1 }, "stale after must be at least"},
		{"lease at the floor", func(c *Config) { c.Lease = MinLease }, ""},
		{"lease below the floor", func(c *Config) { c.Lease = MinLease - time.Millisecond }, "lease must be at least"},
	} {
		c := Config{}
		tt.mutate(&c)
		err := c.withDefaults().validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || strings.Count(err.Error(), "\n") != 0):
			t.Errorf("%s: error %v, want one line containing %q", tt.name, err, tt.want)
		}
	}
	if err := (RetentionConfig{Processed: MinRetention - 1}).withDefaults().validate(); err == nil {
		t.Error("a retention below MinRetention is accepted")
	}
	// Validate checks the config with its defaults, every bad setting at
	// once.
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("a zero Config is not valid: %v", err)
	}
	if err := (Config{Workers: -1, Lease: time.Millisecond}).Validate(); err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("Validate = %v, want two lines (workers, lease)", err)
	}
	if err := (RetentionConfig{Interval: time.Nanosecond}).Validate(); err == nil {
		t.Error("a retention interval below MinRetentionInterval is accepted")
	}
}

// WithDefaults keeps Prefetch as it was given: 0 (adaptive) and negative
// (none) are the pool's to resolve, so that a Config with its defaults
// runs as the Config it came from.
func TestWithDefaultsKeepsThePrefetch(t *testing.T) {
	t.Parallel()
	for _, p := range []int{0, -1, 7} {
		if got := (Config{Prefetch: p}).WithDefaults().Prefetch; got != p {
			t.Errorf("Prefetch %d with its defaults = %d", p, got)
		}
	}
}
