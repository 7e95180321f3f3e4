package kafka

import (
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Ready reports whether ingest is running, its last attempt at writing a
// batch did not fail, and the brokers answered its last probe. It is false
// before Run, after Run returns, while the database refuses or fails batch
// writes, and while the brokers cannot be reached (including at start,
// until they first answer).
func (c *kafkaConsumer) Ready() bool { return c.IsReady() }

// Reachable reports whether the brokers answered the consumer's last probe.
func (c *kafkaConsumer) Reachable() bool { return c.reachable.Load() }

// LastProgress returns when a message was last fetched or a batch last
// written; zero before the first.
func (c *kafkaConsumer) LastProgress() time.Time { return c.Progress() }

// Healthy returns an error when the consumer looks stuck: the current
// FetchMessage call has waited longer than Config.StallTimeout although
// messages are known to be waiting on a partition it reads (from the
// high-water mark of the last message fetched from that partition). The
// backlog is forgotten at each rebalance. Healthy returns nil when Run is not
// running. It is meant for a liveness probe; see the package documentation for
// what it cannot detect.
func (c *kafkaConsumer) Healthy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reader == nil {
		return nil
	}
	// Only the consumer calls Stats, so its counters (reset by each call)
	// count the rebalances since the previous call.
	if c.reader.Stats().Rebalances > 0 {
		clear(c.backlog)
	}
	if c.fetchingSince.IsZero() {
		return nil
	}
	waited := c.Now().Sub(c.fetchingSince)
	if waited < c.cfg.StallTimeout {
		return nil
	}
	var worst topicPartition
	var behind int64
	for tp, lag := range c.backlog {
		if lag > behind {
			worst, behind = tp, lag
		}
	}
	if behind == 0 {
		return nil
	}
	return fmt.Errorf("stalled: no message fetched for %s although %d messages wait on topic %s partition %d",
		waited.Round(time.Second), behind, worst.topic, worst.partition)
}

func (c *kafkaConsumer) fetchStarted() {
	c.mu.Lock()
	c.fetchingSince = c.Now()
	c.mu.Unlock()
}

func (c *kafkaConsumer) fetchReturned(m kafka.Message, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fetchingSince = time.Time{}
	if err != nil {
		return
	}
	c.Progressed()
	tp := topicPartition{m.Topic, m.Partition}
	if m.HighWaterMark > 0 {
		c.backlog[tp] = max(0, m.HighWaterMark-m.Offset-1)
	}
	// The batch being filled holds m: its commit covers m's offset.
	if off, ok := c.pending[tp]; !ok || m.Offset > off {
		c.pending[tp] = m.Offset
	}
}
