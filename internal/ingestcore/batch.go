package ingestcore

import (
	"context"
	"sync"
	"time"
)

// batch is the messages fetched and not yet written.
type batch struct {
	rows  []Row
	bytes int     // the rows' sizes (Row.size), against BatchBytes
	ack   AckFunc // set when the batch is sealed; called once its rows are committed
}

func (b *batch) add(r Row) {
	b.rows = append(b.rows, r)
	b.bytes += r.size()
}

func (b *batch) reset() {
	clear(b.rows) // drop references to payloads
	b.rows = b.rows[:0]
	b.bytes = 0
	b.ack = nil
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
