package worker

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/inboxd/inboxd/config"
)

// Config configures a Pool. Zero values take the defaults documented on
// each field.
type Config struct {
	// Workers is the number of handlers run concurrently (default 64).
	Workers int
	// ClaimBatch caps the rows one claim statement takes (default 500).
	ClaimBatch int
	// Prefetch is how many claimed rows may wait for a free handler, so
	// claims are large and handlers never wait for one (0: the default,
	// min(ClaimBatch, 4·Workers); negative: none). Waiting rows hold their
	// lease (renewed like running ones); at shutdown they are released at
	// once.
	Prefetch int
	// MaxAttempts is the number of attempts before a failing row goes dead
	// (default 10).
	MaxAttempts int
	// Lease is how long a claimed row belongs to this worker without renewal
	// (default 30s). Leases of long handlers are renewed every Lease/3.
	Lease time.Duration
	// RetryPolicy spaces the attempts (default ExponentialBackoff from 1s to
	// 5m).
	RetryPolicy RetryPolicy
	// MaxRetryDelay caps delays that handlers ask for with
	// handlers.RetryAfter (default 5m).
	MaxRetryDelay time.Duration
	// PollInterval is the fallback polling period (default 500ms).
	PollInterval time.Duration
	// RescueInterval is how often expired leases are looked for (default
	// Lease/2, between 1s and 30s).
	RescueInterval time.Duration
	// StatsInterval is how often the live-row gauges are refreshed (default
	// 15s).
	StatsInterval time.Duration
	// ShutdownTimeout is how long in-flight handlers may run after Run's
	// context is cancelled before they are cancelled too (default 20s).
	ShutdownTimeout time.Duration
	// ID names this worker in the locked_by column (default host-pid).
	ID string
	// Now returns the current time; nil uses time.Now. It drives lease
	// renewal scheduling.
	Now func() time.Time
}

// ConfigFrom maps the daemon configuration onto a worker Config.
func ConfigFrom(c config.Config) Config {
	return Config{
		Workers:         c.Workers,
		ClaimBatch:      c.ClaimBatch,
		Prefetch:        c.Prefetch,
		MaxAttempts:     c.MaxAttempts,
		Lease:           c.Lease,
		RetryPolicy:     ExponentialBackoff{Base: c.BackoffBase, Max: c.BackoffMax},
		MaxRetryDelay:   c.BackoffMax,
		PollInterval:    c.PollInterval,
		ShutdownTimeout: c.ShutdownTimeout,
	}
}

func (c Config) withDefaults() Config {
	if c.Workers == 0 {
		c.Workers = 64
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = 500
	}
	switch {
	case c.Prefetch == 0:
		c.Prefetch = min(c.ClaimBatch, 4*c.Workers)
	case c.Prefetch < 0:
		c.Prefetch = 0
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.RetryPolicy == nil {
		c.RetryPolicy = ExponentialBackoff{Base: time.Second, Max: 5 * time.Minute}
	}
	if c.MaxRetryDelay == 0 {
		c.MaxRetryDelay = 5 * time.Minute
	}
	if c.PollInterval == 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.RescueInterval == 0 {
		c.RescueInterval = min(max(c.Lease/2, time.Second), 30*time.Second)
	}
	if c.StatsInterval == 0 {
		c.StatsInterval = 15 * time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 20 * time.Second
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers must be at least 1, got %d", c.Workers))
	}
	if c.ClaimBatch < 1 {
		errs = append(errs, fmt.Errorf("claim batch must be at least 1, got %d", c.ClaimBatch))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("max attempts must be at least 1, got %d", c.MaxAttempts))
	}
	if c.Lease < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("lease must be at least 100ms, got %s", c.Lease))
	}
	if c.PollInterval <= 0 || c.RescueInterval <= 0 || c.StatsInterval <= 0 {
		errs = append(errs, errors.New("poll, rescue and stats intervals must be positive"))
	}
	return errors.Join(errs...)
}

// capacity is the most rows a pool holds at once: running and waiting.
func (c Config) capacity() int { return c.Workers + c.Prefetch }
