package faultsuite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// BrokerMessage is one message a scenario publishes to a real broker
// (RabbitMQ or NATS JetStream).
type BrokerMessage struct {
	// ID is the event id ("" publishes a message without one).
	ID string
	// Type is the event type.
	Type string
	// Body is the payload.
	Body []byte
}

// Broker is a scenario's queue or stream on a real broker server: the
// daemon consumes it, the scenario publishes to it with confirmations,
// and its state tells whether anything is left unacknowledged.
type Broker interface {
	// Kind is the daemon's source_kind label (amqp, nats).
	Kind() string
	// Source is the inbox's source column for its messages (the queue or
	// stream name).
	Source() string
	// Upstream is the server's host:port, for a Proxy in front of it.
	Upstream() string
	// DaemonEnv configures a daemon to consume the queue or stream at
	// addr (host:port: the server's, or a proxy's).
	DaemonEnv(addr string) []string
	// Publish sends msgs and waits for the server's confirmations; ok[i]
	// reports whether msgs[i] was confirmed (a confirmed message is one
	// the broker acknowledged: it must not be lost).
	Publish(ctx context.Context, msgs []BrokerMessage) (ok []bool, err error)
	// Pending describes what the queue or consumer still holds (waiting or
	// delivered without acknowledgement) and reports whether it is empty.
	Pending() (empty bool, detail string)
}

// BrokerStream describes a paced mixed stream for a Broker: N unique events
// with ids Prefix + index, every tenth published twice, every Every-th an
// unknown type (no route: it ends dead), and a malformed message after
// every MalformedEvery-th event (oversize, or without an id when
// MissingID and the index is odd).
type BrokerStream struct {
	N              int
	Prefix         string
	Type           string
	UnknownType    string
	UnknownEvery   int
	MalformedEvery int
	// MissingID makes every other malformed message one without an id
	// (RabbitMQ; a JetStream message always has one: stream/sequence).
	MissingID bool
	// Oversize is the size of an oversize body (above INBOXD_MAX_PAYLOAD).
	Oversize int
	// Rate is events per second; Batch events per publish call.
	Rate, Batch int
}

// ID returns the id of event i.
func (s BrokerStream) ID(i int) string { return fmt.Sprintf("%s%06d", s.Prefix, i) }

// messages returns what event i publishes.
func (s BrokerStream) messages(i int) (msgs []BrokerMessage, unknown bool) {
	typ := s.Type
	if s.UnknownEvery > 0 && i%s.UnknownEvery == s.UnknownEvery-1 {
		typ, unknown = s.UnknownType, true
	}
	m := BrokerMessage{ID: s.ID(i), Type: typ, Body: fmt.Appendf(nil, `{"n":%d}`, i)}
	msgs = append(msgs, m)
	if i%10 == 0 {
		dup := m
		dup.Body = fmt.Appendf(nil, `{"n":%d,"dup":true}`, i)
		msgs = append(msgs, dup)
	}
	if s.MalformedEvery > 0 && i%s.MalformedEvery == 0 {
		bad := BrokerMessage{ID: fmt.Sprintf("bad-%s", s.ID(i)), Type: s.Type, Body: []byte(strings.Repeat("B", s.Oversize))}
		if s.MissingID && (i/s.MalformedEvery)%2 == 1 {
			bad = BrokerMessage{Type: s.Type, Body: fmt.Appendf(nil, "no id after %s", s.ID(i))}
		}
		msgs = append(msgs, bad)
	}
	return msgs, unknown
}

// BrokerProduction is a BrokerStream being published: the routed events,
// unknown-type events and malformed messages the broker confirmed.
type BrokerProduction struct {
	*Production
	mu        sync.Mutex
	unknown   []string
	malformed int
	published int
}

// Unknown returns the confirmed events of the unknown type.
func (p *BrokerProduction) Unknown() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.unknown...)
}

// Malformed is how many malformed messages the broker confirmed.
func (p *BrokerProduction) Malformed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.malformed
}

// Published is how many events (unique ids) were sent so far.
func (p *BrokerProduction) Published() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published
}

// PublishStream sends s to b in the background, paced, and records what
// the broker confirmed: a routed event counts as acknowledged (Acked) once
// its first copy is confirmed. Errors are recorded (Err), not fatal.
func PublishStream(ctx context.Context, b Broker, s BrokerStream) *BrokerProduction {
	p := &BrokerProduction{Production: &Production{ackedAt: map[string]time.Time{}, done: make(chan struct{}), types: map[string]string{}}}
	batch := max(s.Batch, 1)
	go func() {
		defer close(p.done)
		pace := newPacer(s.Rate, batch)
		for start := 0; start < s.N; start += batch {
			if !pace.wait(ctx) {
				return
			}
			if ctx.Err() != nil {
				return
			}
			end := min(start+batch, s.N)
			var msgs []BrokerMessage
			type kind struct {
				event     int
				malformed bool
			}
			var kinds []kind
			unknown := map[int]bool{}
			for i := start; i < end; i++ {
				ms, unk := s.messages(i)
				unknown[i] = unk
				for j, m := range ms {
					msgs = append(msgs, m)
					kinds = append(kinds, kind{event: i, malformed: j > 0 && m.ID != s.ID(i)})
				}
			}
			ok, err := b.Publish(ctx, msgs)
			now := time.Now()
			p.mu.Lock()
			p.Production.mu.Lock()
			if err != nil && p.Production.err == nil {
				p.Production.err = err
			}
			for j, k := range kinds {
				if !ok[j] {
					p.Production.failed++
					continue
				}
				switch {
				case k.malformed:
					p.malformed++
				case p.Production.types[msgs[j].ID] != "":
					// a duplicate of a confirmed event
				case unknown[k.event]:
					p.Production.types[msgs[j].ID] = msgs[j].Type
					p.unknown = append(p.unknown, msgs[j].ID)
				default:
					p.Production.types[msgs[j].ID] = msgs[j].Type
					p.Production.acked = append(p.Production.acked, msgs[j].ID)
					p.Production.ackedAt[msgs[j].ID] = now
				}
			}
			p.published = end
			p.Production.mu.Unlock()
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return p
}

// WaitBrokerDrained waits until b holds nothing pending or unacknowledged,
// failing t after timeout with what it still holds.
func WaitBrokerDrained(t testing.TB, b Broker, timeout time.Duration) {
	t.Helper()
	var detail string
	if !waitCond(timeout, 200*time.Millisecond, func() bool {
		var empty bool
		empty, detail = b.Pending()
		return empty
	}) {
		t.Errorf("NOT ACKNOWLEDGED: %s %s after %s: %s", b.Kind(), b.Source(), timeout, detail)
	}
}
