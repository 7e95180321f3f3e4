package kafka

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/segmentio/kafka-go"
)

// readerHeadroom is added to the largest message accepted (payload, key
// and headers at their bounds) for the reader's MaxBytes, so that such a
// message fits in one fetch with the record batch envelope.
const readerHeadroom = 256 << 10

// messageReader is the part of *kafka.Reader that the consumer uses.
type messageReader interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	CommitMessages(ctx context.Context, msgs ...kafka.Message) error
	Stats() kafka.ReaderStats
	Close() error
}

// queueCapacity is how many fetched messages the reader may buffer ahead of
// the batch: BatchBytes' worth of the largest messages accepted, so the
// buffer is bounded in bytes (a queue sized in messages held 500 MiB of
// 1 MiB messages), at least one and at most a batch.
func (c Config) queueCapacity() int {
	return min(max(1, c.BatchBytes/max(1, ingestcore.LargestMessage(c.Mapping))), c.BatchSize)
}

// readerMaxBytes is the reader's MaxBytes: the largest message accepted
// must fit in one fetch, with its envelope. Smaller would make the broker
// truncate it (or, with old fetch versions, stall the partition on it).
func (c Config) readerMaxBytes() int {
	return ingestcore.LargestMessage(c.Mapping) + readerHeadroom
}

func (c *kafkaConsumer) readerConfig() kafka.ReaderConfig {
	start := kafka.FirstOffset
	if c.cfg.StartFromLatest {
		start = kafka.LastOffset
	}
	debug := c.Log.With().Str("source", "kafka-go").Logger()
	return kafka.ReaderConfig{
		Brokers:       c.cfg.Brokers,
		GroupID:       c.cfg.Group,
		GroupTopics:   c.cfg.Topics,
		Dialer:        c.dialer,
		QueueCapacity: c.cfg.queueCapacity(),
		MaxBytes:      c.cfg.readerMaxBytes(),
		// A partition reader waits this long in a fetch with nothing to read;
		// rebalances and Close wait for it, so keep it short.
		MaxWait:           time.Second,
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		SessionTimeout:    c.cfg.SessionTimeout,
		RebalanceTimeout:  c.cfg.RebalanceTimeout,
		JoinGroupBackoff:  c.cfg.RetryBackoffMax,
		// Synchronous commits: CommitMessages returns once the broker has
		// the offsets. An interval would commit later, and drop offsets on a
		// rebalance.
		CommitInterval:  0,
		StartOffset:     start,
		ReadLagInterval: -1, // not available with groups; would only start a goroutine
		Logger: kafka.LoggerFunc(func(format string, args ...any) {
			debug.Debug().Msg(strings.TrimSpace(fmt.Sprintf(format, args...)))
		}),
		ErrorLogger: kafka.LoggerFunc(func(format string, args ...any) {
			debug.Warn().Msg(strings.TrimSpace(fmt.Sprintf(format, args...)))
		}),
	}
}

// closeReader closes r, waiting until deadline at most: a kafka-go reader's
// Close blocks while a group join is pending. Offsets are committed per
// batch, so abandoning the close loses nothing; the goroutine finishes on its
// own.
func (c *kafkaConsumer) closeReader(r messageReader, deadline time.Time) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Close(); err != nil {
			c.Log.Warn().Err(err).Msg("closing kafka reader failed")
		}
	}()
	t := time.NewTimer(max(time.Until(deadline), 0))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.Log.Warn().Dur("close_timeout", c.cfg.CloseTimeout).
			Msg("kafka reader did not close in time (a group join is probably pending); leaving it behind, offsets are already committed")
	}
}
