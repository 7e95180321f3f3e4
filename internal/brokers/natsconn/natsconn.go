// Package natsconn is the connection to NATS, written once for the NATS
// JetStream source and the outbox's NATS publisher: the nats.go options
// (name, dial timeout, reconnection, credentials, TLS). The URL's rules and
// redaction are internal/natsurl's, which the configuration reads without
// linking nats.go.
package natsconn

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/natsurl"
)

// DialTimeout bounds connecting to NATS, handshakes included.
const DialTimeout = 10 * time.Second

// TLSPrefix names the TLS variables in errors.
const TLSPrefix = "INBOXD_NATS_TLS"

// TLSWanted reports whether a connection to url with tlsc's files uses
// TLS: a tls:// URL or any file set turns it on.
func TLSWanted(url string, tlsc brokers.TLS) bool {
	return tlsc.CAFile != "" || tlsc.CertFile != "" || tlsc.KeyFile != "" || natsurl.TLS(url)
}

// Options returns the nats.go options of a connection to url's servers:
// the client name "inboxd", DialTimeout, unlimited reconnections,
// credsFile (a JWT and NKey seed; empty: the URL's user, if any) and TLS
// (enabled as TLSWanted says, whatever tlsc.Enabled says). It adds no
// connection handler.
func Options(url, credsFile string, tlsc brokers.TLS) ([]nats.Option, error) {
	opts := []nats.Option{nats.Name("inboxd"), nats.Timeout(DialTimeout), nats.MaxReconnects(-1)}
	if credsFile != "" {
		if _, err := os.Stat(credsFile); err != nil {
			return nil, errors.New("ingest: INBOXD_NATS_CREDS_FILE: cannot read the file it names")
		}
		opts = append(opts, nats.UserCredentials(credsFile))
	}
	if tlsc.Enabled = TLSWanted(url, tlsc); tlsc.Enabled {
		tc, err := tlsc.Build(TLSPrefix)
		if err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}
