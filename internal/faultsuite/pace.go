package faultsuite

import (
	"context"
	"time"
)

// pacer spaces a producer's turns so that it sends rate events per second,
// perTurn at a time; a rate of 0 or less does not pace.
type pacer struct {
	interval time.Duration
	next     time.Time
}

func newPacer(rate, perTurn int) *pacer {
	p := &pacer{next: time.Now()}
	if rate > 0 {
		p.interval = time.Duration(float64(time.Second) * float64(perTurn) / float64(rate))
	}
	return p
}

// wait waits for the next turn; it reports false when ctx ended first.
func (p *pacer) wait(ctx context.Context) bool {
	if p.interval <= 0 {
		return true
	}
	if d := time.Until(p.next); d > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
		}
	}
	p.next = p.next.Add(p.interval)
	return true
}
