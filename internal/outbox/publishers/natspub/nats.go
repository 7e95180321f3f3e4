// Package natspub is the outbox relay's publisher to NATS JetStream
// (Nats-Msg-Id, PubAck): Config, New, Publisher. ingest/nats's Publisher
// makes it for an embedder; it links nats.go and no other broker client.
package natspub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/brokers/natsconn"
	"github.com/inboxd/inboxd/internal/natsurl"
	"github.com/inboxd/inboxd/internal/outbox"
)

// DefaultMaxPayload is the size limit Check applies before the first
// connection tells the server's max_payload: NATS's default, 1 MiB.
const DefaultMaxPayload = 1 << 20

const (
	// natsAckTimeout is how long JetStream's client keeps waiting for the
	// PubAck of a message whose Publish already returned (its ctx ended):
	// then it forgets it, so that abandoned acknowledgements do not pile
	// up and stall later publications.
	natsAckTimeout = time.Minute
	// natsDialTimeout bounds connecting when ctx has no earlier deadline.
	natsDialTimeout = 10 * time.Second
)

// Config configures a Publisher: the connection settings of the
// NATS source (INBOXD_NATS_URL, INBOXD_NATS_CREDS_FILE, INBOXD_NATS_TLS_*),
// the same fields as the NATS source's, passed to natsconn.Options.
type Config struct {
	// URL is the server's nats:// or tls:// URL, or a comma list of them.
	// A password in it is never logged.
	URL string
	// CredsFile is a NATS credentials file (JWT and NKey seed); empty
	// authenticates with the URL's user, if any.
	CredsFile string
	// TLS configures TLS, as for the source: enabled by a tls:// URL or
	// any file set.
	TLS brokers.TLS
}

// Publisher publishes to NATS JetStream: every message with
// Nats-Msg-Id = EventID, so that the stream itself drops a duplicate
// within its duplicate window, and acknowledged once the stream stored it
// (its PubAck). It connects on the first Publish; nats.go reconnects by
// itself after. Its methods may be called from any goroutine.
type Publisher struct {
	cfg  Config
	opts []nats.Option
	log  zerolog.Logger

	dialMu sync.Mutex // held while connecting

	mu     sync.Mutex
	nc     *nats.Conn // nil before the first connection
	js     jetstream.JetStream
	closed bool
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher for cfg's server. It does not connect:
// the first Publish does.
func New(cfg Config, log zerolog.Logger) (*Publisher, error) {
	if cfg.URL == "" {
		return nil, errors.New("outbox: no NATS URL (INBOXD_NATS_URL)")
	}
	opts, err := natsconn.Options(cfg.URL, cfg.CredsFile, cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	p := &Publisher{cfg: cfg,
		log: log.With().Str("component", "outbox").Str("broker", outbox.KindNATS).Str("url", natsurl.Redact(cfg.URL)).Logger()}
	p.opts = append(opts,
		// No buffering while reconnecting: a publication then fails at
		// once, rather than waiting in the client to be sent after its
		// Publish returned.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			ev := p.log.Warn()
			if err != nil {
				ev = ev.Err(err)
			}
			ev.Msg("disconnected from NATS; publishing fails while nats.go reconnects")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			p.log.Info().Str("server", nc.ConnectedUrlRedacted()).Msg("reconnected to NATS")
		}),
	)
	return p, nil
}

// natsMsg is m as JetStream receives it: its headers (each value of a
// repeated one), KeyHeader = Key when it has one, Nats-Msg-Id = EventID.
func natsMsg(m outbox.Message) *nats.Msg {
	msg := &nats.Msg{Subject: m.Destination.Name, Data: m.Payload, Header: make(nats.Header, len(m.Headers)+2)}
	for _, h := range m.Headers {
		msg.Header.Add(h.Key, h.Value)
	}
	if m.Key != "" {
		msg.Header.Set(outbox.KeyHeader, m.Key)
	}
	msg.Header.Set(jetstream.MsgIDHeader, m.EventID)
	return msg
}

// natsSize is what the server counts of msg against max_payload: its data
// and its headers as the protocol writes them.
func natsSize(msg *nats.Msg) int {
	n := len(msg.Data) + len("NATS/1.0\r\n\r\n")
	for k, vs := range msg.Header {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// maxPayload is the server's max_payload once connected, else
// DefaultMaxPayload.
func (p *Publisher) maxPayload() int {
	p.mu.Lock()
	nc := p.nc
	p.mu.Unlock()
	if nc != nil {
		if n := nc.MaxPayload(); n > 0 {
			return int(n)
		}
	}
	return DefaultMaxPayload
}

// Check refuses a message nats.go cannot send as it is (natsEncodable:
// ErrUnencodable), or whose data and headers exceed the server's
// max_payload (DefaultMaxPayload before the first connection). A
// stream's own max_msg_size, lower, is enforced by the server: Publish
// refuses the message then.
func (p *Publisher) Check(m outbox.Message) error {
	if err := outbox.UnencodableError(outbox.NATSEncodable(m)); err != nil {
		return err
	}
	if n, limit := natsSize(natsMsg(m)), p.maxPayload(); n > limit {
		return outbox.Refused("nats: message of %d bytes (data and headers) exceeds the server's max_payload of %d bytes", n, limit)
	}
	return nil
}

// PipelinesKeys is false: JetStream answers each message on its own, and
// may store a message of a key after refusing the one before it.
func (p *Publisher) PipelinesKeys() bool { return false }

// Publish publishes msgs asynchronously on one connection, in their order,
// then waits for every PubAck. Per message: stored, or recognised by the
// stream as a duplicate of its Nats-Msg-Id (already stored): nil; over
// the server's max_payload, a header nats.go cannot encode, or an error
// of the stream with code 400 (natsError): refused; no stream for the
// subject (no responders: JetStream's client does not retry it here, a
// retry would come after later messages), a lost connection, a server
// error: not refused. A message not sent because an earlier one could not
// be (disconnected) fails without being sent.
//
// When ctx ends, Publish returns at once, the messages not acknowledged
// failing with ctx's error. What was written to the socket may still be
// stored: republished by the relay with the same Nats-Msg-Id, it is
// dropped by the stream as a duplicate within its window.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	js, err := p.connect(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		if m.Destination.Kind != outbox.KindNATS {
			errs[i] = fmt.Errorf("nats: destination %s is not a NATS subject", m.Destination)
			continue
		}
		f, err := js.PublishMsgAsync(natsMsg(m), jetstream.WithRetryAttempts(0))
		if err != nil {
			if errs[i] = natsError(m, err); !errors.Is(errs[i], outbox.ErrRefused) {
				for j := i + 1; j < len(msgs); j++ {
					errs[j] = fmt.Errorf("nats: subject %s: not sent after an earlier failure: %w", msgs[j].Destination.Name, err)
				}
				break
			}
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			// Stored, or a duplicate (PubAck.Duplicate) already stored.
		case err := <-f.Err():
			errs[i] = natsError(msgs[i], err)
		case <-ctx.Done():
			for j := i; j < len(msgs); j++ {
				if futures[j] != nil {
					errs[j] = fmt.Errorf("nats: subject %s: not acknowledged: %w", msgs[j].Destination.Name, ctx.Err())
				}
			}
			return errs
		}
	}
	return errs
}

// natsAccountResourcesExceeded is JetStream's error code for an account
// over its limits: a 400, but a state of the account that passes, not a
// verdict on the message.
const natsAccountResourcesExceeded jetstream.ErrorCode = 10002

// natsError classifies a publication's error. JetStream's errors carry an
// HTTP-like code: a 400 is the stream's verdict on the message (10054 over
// its max_msg_size, 10060 a Nats-Expected-Stream naming another stream,
// 10071 a wrong expected last sequence, a sealed stream, …) and a refusal,
// but for an account over its limits; a 503 or 500 (no leader, storage
// unavailable, a stream full with discard new) is not.
func natsError(m outbox.Message, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrBadHeaderMsg):
		return outbox.Unencodable("nats: subject %s: %v", m.Destination.Name, err)
	case errors.Is(err, nats.ErrMaxPayload):
		return outbox.Refused("nats: subject %s: %v", m.Destination.Name, err)
	case errors.As(err, &apiErr) && apiErr.Code == 400 && apiErr.ErrorCode != natsAccountResourcesExceeded:
		return outbox.Refused("nats: subject %s: %v (JetStream error %d)", m.Destination.Name, err, apiErr.ErrorCode)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("nats: no JetStream stream stores subject %s: %w", m.Destination.Name, err)
	}
	return fmt.Errorf("nats: subject %s: %w", m.Destination.Name, err)
}

// connect returns the JetStream context, connecting first if need be
// (before the first Publish, or once nats.go gave the connection up),
// within ctx's deadline.
func (p *Publisher) connect(ctx context.Context) (jetstream.JetStream, error) {
	p.dialMu.Lock()
	defer p.dialMu.Unlock()
	p.mu.Lock()
	closed, nc, js := p.closed, p.nc, p.js
	p.mu.Unlock()
	if closed {
		return nil, errors.New("nats: publisher closed")
	}
	if nc != nil && !nc.IsClosed() {
		return js, nil // connected, or nats.go reconnecting
	}
	if nc != nil {
		p.log.Warn().Msg("the NATS connection closed for good; connecting again")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("nats: not connected: %w", err)
	}
	timeout := natsDialTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	nc, err := nats.Connect(p.cfg.URL, append(slices.Clip(p.opts), nats.Timeout(timeout))...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", natsurl.Redact(p.cfg.URL), err)
	}
	js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(natsAckTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: open JetStream: %w", err)
	}
	p.mu.Lock()
	if p.closed { // closed while connecting
		p.mu.Unlock()
		nc.Close()
		return nil, errors.New("nats: publisher closed")
	}
	p.nc, p.js = nc, js
	p.mu.Unlock()
	p.log.Info().Str("server", nc.ConnectedUrlRedacted()).Int64("max_payload", nc.MaxPayload()).Msg("connected to NATS")
	return js, nil
}

// Ready reports whether the connection is up.
func (p *Publisher) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nc != nil && p.nc.IsConnected()
}

// Close closes the connection. It may be called more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	nc := p.nc
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if nc != nil && !already {
		nc.Close()
	}
	return nil
}
