// Package amqppub is the outbox relay's publisher to RabbitMQ exchanges
// (confirms, mandatory): Config, New, Publisher. ingest/amqp's Publisher
// makes it for an embedder; it links amqp091-go and no other broker client.
package amqppub

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/brokers/amqpconn"
	"github.com/inboxd/inboxd/internal/outbox"
)

// DefaultMaxMessageBytes is Config.MaxMessageBytes when it is zero:
// 16 MiB, well under RabbitMQ's default max_message_size (128 MiB).
const DefaultMaxMessageBytes = 16 << 20

// amqpCloseTimeout bounds closing a connection or a channel that may be cut
// off (a plain Close would wait for the heartbeats to time out).
const amqpCloseTimeout = time.Second

// Config configures a Publisher: the server of the RabbitMQ
// source's settings (INBOXD_AMQP_URL, INBOXD_AMQP_TLS_*).
type Config struct {
	// URL is the broker's amqp:// or amqps:// URL. Its password is never
	// logged.
	URL string
	// TLS configures amqps://: CA bundle and client certificate, as for
	// the source. Enabled follows the URL's scheme.
	TLS brokers.TLS
	// MaxMessageBytes is the largest payload sent; a larger one is
	// refused. It must not exceed the server's max_message_size. Zero is
	// DefaultMaxMessageBytes.
	MaxMessageBytes int
}

// Publisher publishes to RabbitMQ exchanges on one channel in confirm
// mode, every message mandatory and persistent: a message is acknowledged
// once the broker confirmed it, and one that no queue takes (basic.return)
// is refused instead of silently dropped. It connects on the first Publish,
// and again after the connection or the channel closed. One Publish runs
// at a time; its methods may be called from any goroutine.
type Publisher struct {
	cfg Config
	log zerolog.Logger
	sem chan struct{} // held by the Publish using the channel

	mu     sync.Mutex
	conn   *amqp.Connection // nil before the first Publish and after a failure
	ch     *amqpChannel     // nil while no channel is open
	closed bool
}

// amqpChannel is the confirm-mode channel and its notifications.
type amqpChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	reason  *amqp.Error // the close, once read from closes
}

// closeReason is why the server or the connection closed the channel, or
// nil while it is open (or closed without a reason).
func (c *amqpChannel) closeReason() *amqp.Error {
	if c.reason == nil {
		select {
		case e := <-c.closes:
			c.reason = e
		default:
		}
	}
	return c.reason
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher for cfg's server. It does not connect:
// the first Publish does.
func New(cfg Config, log zerolog.Logger) (*Publisher, error) {
	if cfg.URL == "" {
		return nil, errors.New("outbox: no RabbitMQ URL (INBOXD_AMQP_URL)")
	}
	if _, err := amqp.ParseURI(cfg.URL); err != nil {
		return nil, errors.New("outbox: INBOXD_AMQP_URL is not a valid amqp:// or amqps:// URL")
	}
	if cfg.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("outbox: RabbitMQ max message bytes must not be negative, got %d", cfg.MaxMessageBytes)
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	return &Publisher{cfg: cfg, sem: make(chan struct{}, 1),
		log: log.With().Str("component", "outbox").Str("broker", outbox.KindAMQP).Str("url", amqpconn.RedactURL(cfg.URL)).Logger()}, nil
}

// Check refuses a message amqp091-go cannot send as it is (amqpEncodable:
// ErrUnencodable) or whose payload exceeds MaxMessageBytes.
func (p *Publisher) Check(m outbox.Message) error {
	if err := outbox.UnencodableError(outbox.AMQPEncodable(m, p.frameSize())); err != nil {
		return err
	}
	if len(m.Payload) > p.cfg.MaxMessageBytes {
		return outbox.Refused("amqp: payload of %d bytes exceeds the limit of %d bytes", len(m.Payload), p.cfg.MaxMessageBytes)
	}
	return nil
}

// PipelinesKeys is false: RabbitMQ confirms each message on its own, and
// may take a message of a key after nacking the one before it (a queue
// over its length limit, room made between the two).
func (p *Publisher) PipelinesKeys() bool { return false }

// frameSize is the connection's negotiated frame_max once connected, else
// DefaultAMQPFrameSize.
func (p *Publisher) frameSize() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil && p.conn.Config.FrameSize > 0 {
		return p.conn.Config.FrameSize
	}
	return outbox.DefaultAMQPFrameSize
}

// Publish publishes msgs on the channel in their order, mandatory and
// persistent, as amqpMessage makes them (message_id = EventID, type =
// EventType, the standard properties from their headers, the other
// headers and KeyHeader = Key in the headers table), then waits for every
// confirmation. Per message:
//   - one amqp091-go cannot encode (amqpMessage): refused, not sent;
//   - confirmed (basic.ack) without a basic.return: nil;
//   - returned (no queue bound for its routing key): refused;
//   - nacked: not refused. RabbitMQ nacks only when it could not take
//     responsibility for the message (a queue full with
//     overflow=reject-publish, an internal error of a queue): a state of
//     the destination that passes, not a verdict on the message;
//   - the channel closed by the server: a message over the server's
//     max_message_size (406, its size named in the reason) is refused;
//     anything else, a missing exchange (404) first of all, is not: the
//     destination is missing and the relay holds it back. The messages
//     not confirmed when a channel closes all fail, and the next Publish
//     opens a new channel (and a new connection if that one closed too).
//
// A message not sent because an earlier one could not be (the channel or
// the connection closed) fails without being sent. When ctx ends, Publish
// returns at once, the messages not confirmed failing with ctx's error; it
// closes the channel, so no confirmation or return of this call is mistaken
// for one of the next, but what was written to the socket may still be
// routed: the duplicates the relay's at-least-once bound counts. Opening
// the connection is bounded by ctx's deadline.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	failAll := func(from int, err error) {
		for i := from; i < len(msgs); i++ {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	select {
	case p.sem <- struct{}{}:
		defer func() { <-p.sem }()
	case <-ctx.Done():
		failAll(0, fmt.Errorf("amqp: not sent: %w", ctx.Err()))
		return errs
	}
	ch, err := p.channel(ctx)
	if err != nil {
		failAll(0, err)
		return errs
	}

	dcs := make([]*amqp.DeferredConfirmation, len(msgs))
	byID := map[string][]int{} // message_id → indexes, to match returns
	for i, m := range msgs {
		if m.Destination.Kind != outbox.KindAMQP {
			errs[i] = fmt.Errorf("amqp: destination %s is not a RabbitMQ exchange", m.Destination)
			continue
		}
		pub, why := amqpMessage(m, p.frameSize())
		if len(why) > 0 {
			// amqp091-go would close the connection on it, every
			// message on it failing: refused here, never sent.
			errs[i] = outbox.UnencodableError(why)
			continue
		}
		dc, err := ch.ch.PublishWithDeferredConfirmWithContext(ctx, m.Destination.Name, m.Destination.RoutingKey,
			true, false, pub)
		if err != nil {
			failAll(i, fmt.Errorf("amqp: not sent: %w", err))
			break
		}
		dcs[i] = dc
		byID[m.EventID] = append(byID[m.EventID], i)
	}

	returned := map[int]amqp.Return{}
	noteReturn := func(r amqp.Return) {
		for _, i := range byID[r.MessageId] {
			if _, ok := returned[i]; !ok {
				returned[i] = r
				return
			}
		}
	}
	returns := ch.returns // nil once closed
	broken := false       // the channel must not be used again
	culprit := true       // the first message unconfirmed at a channel close
	for i, dc := range dcs {
		if dc == nil {
			continue
		}
	wait:
		for {
			select {
			case r, ok := <-returns:
				if !ok { // closed with the channel
					returns = nil
					continue
				}
				noteReturn(r)
			case <-dc.Done():
				break wait
			case <-ctx.Done():
				failAll(i, fmt.Errorf("amqp: not confirmed: %w", ctx.Err()))
				p.dropChannel(ch)
				return errs
			}
		}
		// A return comes before its message's confirmation, and the
		// client hands it over before it reads the next frame: every
		// return of the messages confirmed so far has arrived.
	drain:
		for returns != nil {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				noteReturn(r)
			default:
				break drain
			}
		}
		m := msgs[i]
		switch reason := ch.closeReason(); {
		case dc.Acked():
			if r, ok := returned[i]; ok {
				errs[i] = outbox.Refused("amqp: exchange %q, routing key %q: unroutable, no queue took it (%d %s)",
					m.Destination.Name, m.Destination.RoutingKey, r.ReplyCode, r.ReplyText)
			}
		case reason != nil || ch.ch.IsClosed():
			broken = true
			errs[i] = p.closedError(m, reason, culprit)
			culprit = false
		default:
			errs[i] = fmt.Errorf("amqp: exchange %q: nacked by the broker (a queue full or failing); retried later", m.Destination.Name)
		}
	}
	if broken {
		p.dropChannel(ch)
	}
	return errs
}

// amqpTooLarge reads the size of the message RabbitMQ refused from its
// reason: "message size 134217729 is larger than configured max size
// 134217728".
var amqpTooLarge = regexp.MustCompile(`message size (\d+) is larger than`)

// amqpBadHeader reads the header RabbitMQ refused from its reason:
// "invalid message: {unacceptable_type_in_header,\"CC\",longstr}".
var amqpBadHeader = regexp.MustCompile(`unacceptable_type_in_header,\\?"([^"\\]*)`)

// closedError is the error of message m, not confirmed when its channel
// closed for reason (nil: the connection closed without one). Only the
// first message unconfirmed at the close (culprit) can be the one the
// server closed it for. A 406 (PRECONDITION_FAILED) on publishing is the
// server's verdict on that message (too large, a header of a type it
// refuses, an expiration or a user_id it does not take): a refusal,
// never an outage of its exchange. When the reason names the size or the
// header, m must be the message it names.
func (p *Publisher) closedError(m outbox.Message, reason *amqp.Error, culprit bool) error {
	if reason == nil {
		return fmt.Errorf("amqp: exchange %q: not confirmed: the channel closed", m.Destination.Name)
	}
	if culprit && reason.Code == amqp.PreconditionFailed {
		its := true
		if sm := amqpTooLarge.FindStringSubmatch(reason.Reason); sm != nil {
			its = sm[1] == strconv.Itoa(len(m.Payload))
		} else if sm := amqpBadHeader.FindStringSubmatch(reason.Reason); sm != nil {
			its = slices.ContainsFunc(m.Headers, func(h outbox.Header) bool { return h.Key == sm[1] })
		}
		if its {
			return outbox.Refused("amqp: exchange %q: %s", m.Destination.Name, reason.Reason)
		}
	}
	if culprit && reason.Code == amqp.NotFound {
		p.log.Warn().Str("exchange", m.Destination.Name).Str("reason", reason.Reason).
			Msg("RabbitMQ closed the channel: the exchange does not exist; its messages are held back")
		return fmt.Errorf("amqp: exchange %q does not exist: %w", m.Destination.Name, reason)
	}
	return fmt.Errorf("amqp: exchange %q: not confirmed, the channel closed: %w", m.Destination.Name, reason)
}

// amqpProperties are amqpconn.Properties by header name.
var amqpProperties = func() map[string]amqpconn.Property {
	m := make(map[string]amqpconn.Property, len(amqpconn.Properties))
	for _, p := range amqpconn.Properties {
		m[p.Header] = p
	}
	return m
}()

// amqpMessage is m as RabbitMQ receives it, persistent: message_id =
// EventID, type = EventType, the properties of amqpconn.Properties from
// the headers of their names, the other headers and KeyHeader = Key in the
// headers table. It also returns why amqp091-go could not send it within
// frames of frameMax bytes, or a consumer on amqp091-go read it
// (amqpEncodable, the rules without the client).
func amqpMessage(m outbox.Message, frameMax int) (amqp.Publishing, []string) {
	body := m.Payload
	if body == nil {
		body = []byte{}
	}
	pub := amqp.Publishing{Headers: make(amqp.Table, len(m.Headers)+1), DeliveryMode: amqp.Persistent,
		MessageId: m.EventID, Type: m.EventType, Body: body}
	for _, h := range m.Headers {
		if prop, ok := amqpProperties[h.Key]; ok {
			_ = prop.Set(&pub, h.Value) // a refusal is among outbox.AMQPEncodable's reasons
			continue
		}
		pub.Headers[h.Key] = h.Value
	}
	if m.Key != "" {
		pub.Headers[outbox.KeyHeader] = m.Key
	}
	return pub, outbox.AMQPEncodable(m, frameMax)
}

// channel returns the open channel, opening the connection and the channel
// first if need be, within ctx.
func (p *Publisher) channel(ctx context.Context) (*amqpChannel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("amqp: publisher closed")
	}
	if p.ch != nil && !p.ch.ch.IsClosed() {
		return p.ch, nil
	}
	p.ch = nil
	if p.conn != nil && p.conn.IsClosed() {
		p.log.Warn().Msg("the connection to RabbitMQ closed; connecting again")
		p.conn = nil
	}
	if p.conn == nil {
		conn, err := amqpconn.Dial(ctx, p.cfg.URL, p.cfg.TLS, nil)
		if err != nil {
			return nil, fmt.Errorf("amqp: connect to %s: %w", amqpconn.RedactURL(p.cfg.URL), err)
		}
		p.conn = conn
		p.log.Info().Msg("connected to RabbitMQ")
	}
	// Opening the channel is two round trips, not bounded by the client:
	// on a connection cut off they would wait for the heartbeats. When ctx
	// ends first, closing the connection ends them.
	type opened struct {
		ch  *amqpChannel
		err error
	}
	done := make(chan opened, 1)
	conn := p.conn
	go func() {
		ch, err := openAMQPChannel(conn)
		done <- opened{ch, err}
	}()
	var o opened
	select {
	case o = <-done:
	case <-ctx.Done():
		_ = conn.CloseDeadline(time.Now())
		<-done
		o.err = ctx.Err()
	}
	if o.err != nil {
		_ = conn.CloseDeadline(time.Now().Add(amqpCloseTimeout))
		p.conn = nil
		return nil, fmt.Errorf("amqp: open a confirm channel: %w", o.err)
	}
	p.ch = o.ch
	return p.ch, nil
}

// openAMQPChannel opens a channel on conn in confirm mode, with its
// notifications.
func openAMQPChannel(conn *amqp.Connection) (*amqpChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	c := &amqpChannel{ch: ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 128)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1))}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	return c, nil
}

// dropChannel closes ch, if it is still the publisher's, so that the next
// Publish opens a new one.
func (p *Publisher) dropChannel(ch *amqpChannel) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != ch {
		return
	}
	p.ch = nil
	if !ch.ch.IsClosed() {
		// A channel.close waits for the server's close-ok: on a
		// connection cut off, that never comes. Drop the connection
		// instead, at once (Publish's ctx has ended); the next Publish
		// dials again.
		_ = p.conn.CloseDeadline(time.Now())
		p.conn = nil
	}
}

// Ready reports whether the connection is open.
func (p *Publisher) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn != nil && !p.conn.IsClosed()
}

// Close closes the connection. It may be called more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.ch = nil
	if p.conn != nil {
		conn := p.conn
		p.conn = nil
		if err := conn.CloseDeadline(time.Now().Add(amqpCloseTimeout)); err != nil && !errors.Is(err, amqp.ErrClosed) {
			return fmt.Errorf("amqp: close: %w", err)
		}
	}
	return nil
}
