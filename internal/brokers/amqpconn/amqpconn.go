// Package amqpconn is the connection to RabbitMQ, written once for the
// RabbitMQ source and the outbox's RabbitMQ publisher: dialing (TLS from
// an amqps:// URL, SASL from the URL, heartbeats, the handshake's
// deadline), the URL's redaction for logs, the prefetch's bounds, and the
// AMQP properties inboxd carries as row headers, both ways.
package amqpconn

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/internal/brokers"
)

// DialTimeout bounds connecting to RabbitMQ, handshakes included, unless
// the URL's connection_timeout says otherwise.
const DialTimeout = 10 * time.Second

// TLSPrefix names the TLS variables in errors.
const TLSPrefix = "INBOXD_AMQP_TLS"

// TLSURL reports whether url asks for TLS: AMQP's TLS follows the scheme.
func TLSURL(url string) bool { return strings.HasPrefix(strings.ToLower(url), "amqps://") }

// Dial opens a connection to the RabbitMQ server at rawURL: TLS (tlsc's
// files, enabled by an amqps:// URL whatever tlsc.Enabled says), 10s
// heartbeats (or the URL's heartbeat parameter), connection_name "inboxd".
// ctx bounds the TCP connection; the TLS and AMQP handshakes are bounded by
// DialTimeout (or the URL's connection_timeout), or ctx's deadline when it
// comes first, and end when ctx is cancelled. wrap, when not nil, is given
// the connection once TLS is up and returns what amqp.Open reads the
// server's frames through (the source's frame reader; the outbox reads
// nothing a sender wrote, and passes nil).
func Dial(ctx context.Context, rawURL string, tlsc brokers.TLS, wrap func(net.Conn) net.Conn) (*amqp.Connection, error) {
	uri, err := amqp.ParseURI(rawURL)
	if err != nil {
		return nil, err
	}
	c := amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US", Vhost: uri.Vhost, ChannelMax: uri.ChannelMax,
		Properties: amqp.Table{"connection_name": "inboxd"}}
	if c.SASL, err = saslOf(uri); err != nil {
		return nil, err
	}
	// The URL's heartbeat parameter (seconds), as amqp.DialConfig reads
	// it: amqp.URI keeps it unexported.
	if u, err := url.Parse(rawURL); err == nil && u.Query().Has("heartbeat") {
		if n, err := strconv.Atoi(u.Query().Get("heartbeat")); err == nil && n >= 0 {
			c.Heartbeat = time.Duration(n) * time.Second
		}
	}
	timeout := DialTimeout
	if uri.ConnectionTimeout > 0 {
		timeout = time.Duration(uri.ConnectionTimeout) * time.Millisecond
	}
	d := net.Dialer{Timeout: timeout}
	raw, err := d.DialContext(ctx, "tcp", net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
	if err != nil {
		return nil, err
	}
	// As amqp.DefaultDial: a deadline for the TLS and AMQP handshakes
	// (heartbeats have not started), which amqp.Open clears once the
	// connection is open; ctx's deadline if it comes first, and a
	// cancelled ctx closes the connection meanwhile.
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if err := raw.SetDeadline(deadline); err != nil {
		_ = raw.Close()
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	defer stop()
	conn := raw
	if tlsc.Enabled = TLSURL(rawURL); tlsc.Enabled {
		tc, err := tlsc.Build(TLSPrefix)
		if err != nil {
			_ = raw.Close()
			return nil, err
		}
		if tc.ServerName == "" {
			tc.ServerName = uri.Host
		}
		tconn := tls.Client(raw, tc)
		if err := tconn.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		conn = tconn
	}
	if wrap != nil {
		conn = wrap(conn)
	}
	ac, err := amqp.Open(conn, c)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	if !stop() {
		// ctx was cancelled as the handshake ended: the connection is
		// closed under the library.
		_ = ac.Close()
		return nil, ctx.Err()
	}
	return ac, nil
}

// saslOf is the SASL mechanisms of uri, as amqp.DialConfig picks them:
// those of its auth_mechanism parameter, else PLAIN with its user and
// password.
func saslOf(uri amqp.URI) ([]amqp.Authentication, error) {
	if len(uri.AuthMechanism) == 0 {
		return []amqp.Authentication{uri.PlainAuth()}, nil
	}
	var sasl []amqp.Authentication
	for _, m := range uri.AuthMechanism {
		switch strings.ToUpper(m) {
		case "PLAIN":
			sasl = append(sasl, uri.PlainAuth())
		case "AMQPLAIN":
			sasl = append(sasl, uri.AMQPlainAuth())
		case "EXTERNAL":
			sasl = append(sasl, &amqp.ExternalAuth{})
		default:
			return nil, fmt.Errorf("unsupported auth_mechanism %q in the RabbitMQ URL", m)
		}
	}
	return sasl, nil
}

// ValidURL reports whether s is an amqp:// or amqps:// URL the client
// takes.
func ValidURL(s string) bool {
	_, err := amqp.ParseURI(s)
	return err == nil
}

// RedactURL reduces an AMQP URL to amqp[s]://user@host:port/vhost, for
// logs: never the password. A URL that does not parse gives "(invalid)".
func RedactURL(s string) string {
	u, err := amqp.ParseURI(s)
	if err != nil {
		return "(invalid)"
	}
	out := url.URL{Scheme: u.Scheme, Host: net.JoinHostPort(u.Host, strconv.Itoa(u.Port)), Path: "/" + u.Vhost}
	if u.Username != "" {
		out.User = url.User(u.Username)
	}
	return out.String()
}

// DefaultPrefetch is the prefetch of a queue left at zero: twice
// batchSize, capped so that the deliveries held stay within 4 x batchBytes
// of messages of largest bytes.
func DefaultPrefetch(batchSize, batchBytes, largest int) int {
	held := max(1, 4*batchBytes/max(1, largest))
	return min(2*batchSize, held)
}
