package ingest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// newDialer builds the kafka-go dialer used for every broker connection,
// with TLS and SASL as configured.
func newDialer(c Config) (*kafka.Dialer, error) {
	tlsConfig, err := c.TLS.build()
	if err != nil {
		return nil, err
	}
	mech, err := c.SASL.build()
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{
		ClientID:      c.ClientID,
		Timeout:       10 * time.Second,
		DualStack:     true,
		TLS:           tlsConfig,
		SASLMechanism: mech,
	}, nil
}

// build returns the TLS client configuration, or nil when TLS is off. File
// names appear in errors; file contents never do.
func (t TLSConfig) build() (*tls.Config, error) { return t.Build("INBOXD_KAFKA_TLS") }

// Build returns the TLS client configuration, or nil when TLS is off, with
// errors naming the variables of prefix (INBOXD_KAFKA_TLS, INBOXD_AMQP_TLS,
// INBOXD_NATS_TLS). File names appear in errors; file contents never do.
// The sources and the outbox's publishers both build theirs here.
func (t TLSConfig) Build(prefix string) (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // explicit opt-in, documented as tests only
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s_CA_FILE: %w", prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s_CA_FILE: no PEM certificate found in %s", prefix, t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s_CERT_FILE/%s_KEY_FILE: %w", prefix, prefix, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// build returns the SASL mechanism, or nil when SASL is off.
func (s SASLConfig) build() (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "":
		return nil, nil
	case "PLAIN":
		return plain.Mechanism{Username: s.Username, Password: s.Password}, nil
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		algo := scram.SHA256
		if s.Mechanism == "SCRAM-SHA-512" {
			algo = scram.SHA512
		}
		mech, err := scram.Mechanism(algo, s.Username, s.Password)
		if err != nil {
			// The scram library's error is about the user name or password
			// failing SASLprep; do not echo either.
			return nil, errors.New("INBOXD_KAFKA_SASL_USERNAME/INBOXD_KAFKA_SASL_PASSWORD: not usable for SCRAM (SASLprep failed)")
		}
		return mech, nil
	default:
		return nil, fmt.Errorf("INBOXD_KAFKA_SASL_MECHANISM: must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", s.Mechanism)
	}
}
