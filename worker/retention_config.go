package worker

import (
	"errors"
	"fmt"
	"time"
)

// RetentionConfig configures the engine's retention, which deletes expired
// rows (inboxd.Config.Retention, and inboxd prune). Zero values take the
// defaults documented on each field.
type RetentionConfig struct {
	// Processed is how long processed rows are kept after processed_at
	// (default 168h). Deduplication holds only while a row exists, so this
	// must outlast the retention of the topics the rows came from.
	Processed time.Duration
	// Failed is how long dead and rejected rows are kept after they went
	// dead or were rejected (updated_at); 0 keeps them until requeued or
	// discarded by hand. Dead rows that hold their key back are kept
	// whatever it says (BlockingTypes).
	Failed time.Duration
	// Interval is the time between passes (default 1m).
	Interval time.Duration
	// Batch caps the rows one delete statement removes (default 5000), so
	// each transaction stays short.
	Batch int
	// Pause is the time between two batches of one pass (default 10ms), so
	// deletions leave room for the rest of the database's work. Batch and
	// Pause bound how fast retention deletes: the defaults allow tens of
	// thousands of rows a second, more than ingest brings on a small
	// machine (1,000 rows every 50ms fell behind 21,000 events/s, and the
	// table grew without bound).
	Pause time.Duration
	// StatementTimeout bounds each statement (default 30s).
	StatementTimeout time.Duration
	// BlockingTypes returns the event types of the routes whose dead rows
	// hold their key back (ordered, on_dead: block, as the pool's routes
	// are now: inboxd.New sets it). Their dead rows with a key are kept
	// whatever Failed says: deleting one would let the rows parked behind it
	// run, and a redelivery of it run after them. Nil keeps none (every
	// expired dead row is deleted).
	BlockingTypes func() []string
}

func (c RetentionConfig) withDefaults() RetentionConfig {
	if c.Processed == 0 {
		c.Processed = DefaultRetention
	}
	if c.Interval == 0 {
		c.Interval = DefaultRetentionInterval
	}
	if c.Batch == 0 {
		c.Batch = 5000
	}
	if c.Pause == 0 {
		c.Pause = 10 * time.Millisecond
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = DefaultStatementTimeout
	}
	return c
}

// WithDefaults returns c with every zero field set to its default, as the
// engine's retention applies them.
func (c RetentionConfig) WithDefaults() RetentionConfig { return c.withDefaults() }

// Validate reports every setting of c, with its defaults (WithDefaults),
// that is out of its bounds: one error per setting, joined.
func (c RetentionConfig) Validate() error { return c.withDefaults().validate() }

func (c RetentionConfig) validate() error {
	var errs []error
	if c.Processed < MinRetention {
		errs = append(errs, fmt.Errorf("processed retention must be at least %s, got %s", MinRetention, c.Processed))
	}
	if c.Failed != 0 && c.Failed < MinRetention {
		errs = append(errs, fmt.Errorf("failed retention must be 0 (keep) or at least %s, got %s", MinRetention, c.Failed))
	}
	if c.Interval < MinRetentionInterval {
		errs = append(errs, fmt.Errorf("retention interval must be at least %s, got %s", MinRetentionInterval, c.Interval))
	}
	if c.StatementTimeout < MinStatementTimeout {
		errs = append(errs, fmt.Errorf("retention statement timeout must be at least %s, got %s", MinStatementTimeout, c.StatementTimeout))
	}
	if c.Batch < 1 || c.Pause < 0 {
		errs = append(errs, errors.New("retention batch must be positive and pause not negative"))
	}
	return errors.Join(errs...)
}
