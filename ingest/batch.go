package ingest

import (
	"context"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// batch is the messages fetched and not yet written.
type batch struct {
	rows  []Row
	bytes int                      // the rows' sizes (Row.size), against Config.BatchBytes
	last  map[topicPartition]int64 // highest offset per partition
}

func (b *batch) add(m kafka.Message, r Row) {
	b.rows = append(b.rows, r)
	b.bytes += r.size()
	if b.last == nil {
		b.last = make(map[topicPartition]int64)
	}
	tp := topicPartition{m.Topic, m.Partition}
	if off, ok := b.last[tp]; !ok || m.Offset > off {
		b.last[tp] = m.Offset
	}
}

// commits returns one message per partition, carrying the highest offset:
// committing it covers every lower offset of the partition.
func (b *batch) commits() []kafka.Message {
	msgs := make([]kafka.Message, 0, len(b.last))
	for tp, off := range b.last {
		msgs = append(msgs, kafka.Message{Topic: tp.topic, Partition: tp.partition, Offset: off})
	}
	return msgs
}

func (b *batch) reset() {
	clear(b.rows) // drop references to payloads
	b.rows = b.rows[:0]
	b.bytes = 0
	clear(b.last)
}

// batchDeadline ends when the filling batch must be written: its timeout
// passed, or the writer became free for it. The loop starts and stops it;
// the writer may expire it early from its own goroutine.
type batchDeadline struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
}

func (d *batchDeadline) start(parent context.Context, after time.Duration) {
	d.stop()
	ctx, cancel := context.WithTimeout(parent, after)
	d.mu.Lock()
	d.ctx, d.cancel = ctx, cancel
	d.mu.Unlock()
}

// context is the current deadline's context.
func (d *batchDeadline) context() context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctx
}

// expired reports whether the current deadline has ended.
func (d *batchDeadline) expired() bool {
	ctx := d.context()
	return ctx != nil && ctx.Err() != nil
}

// expire ends the current deadline now (a no-op when there is none).
func (d *batchDeadline) expire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		d.cancel()
	}
}

func (d *batchDeadline) stop() {
	d.expire()
}
