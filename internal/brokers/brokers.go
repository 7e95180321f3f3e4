// Package brokers holds the connection rules every broker shares, written
// once for the sources and the outbox's publishers alike: TLS from files,
// the SASL mechanisms offered to Kafka, and the checks of both settings.
// Each broker's own dialing, URL parsing and redaction is in a package of
// its own below (amqpconn, natsconn; Kafka's are TLS and SASL alone, which
// each Kafka client takes in its own form), so that a program linking one
// broker's client links no other.
package brokers

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
)

// TLS is the TLS settings of a connection to a broker. The sources' and
// the outbox's public settings (ingest.TLSConfig) have the same fields and
// convert to it.
type TLS struct {
	// Enabled turns TLS on.
	Enabled bool
	// CAFile is a PEM bundle of CAs to trust; empty uses the system pool.
	CAFile string
	// CertFile is the client certificate (PEM) for mutual TLS.
	CertFile string
	// KeyFile is the client key (PEM) for mutual TLS.
	KeyFile string
	// ServerName overrides the name checked in the broker's certificate.
	ServerName string
	// InsecureSkipVerify disables certificate verification (tests only).
	InsecureSkipVerify bool
}

// Build returns the TLS client configuration, or nil when TLS is off, with
// errors naming the variables of prefix (INBOXD_KAFKA_TLS, INBOXD_AMQP_TLS,
// INBOXD_NATS_TLS). File names appear in errors; file contents never do.
func (t TLS) Build(prefix string) (*tls.Config, error) {
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

// FilesWithoutTLS reports whether a CA, certificate or key file is set
// while TLS is off: a setting that would be ignored.
func (t TLS) FilesWithoutTLS() bool {
	return !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "")
}

// HalfKeyPair reports whether only one of the certificate and its key is
// set: mutual TLS needs both.
func (t TLS) HalfKeyPair() bool { return (t.CertFile == "") != (t.KeyFile == "") }

// The SASL mechanisms inboxd offers to Kafka brokers (the source's
// kafka-go and the outbox's franz-go alike).
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SASLMechanisms lists them, in the order errors name them.
var SASLMechanisms = []string{SASLPlain, SASLScramSHA256, SASLScramSHA512}

// ValidSASLMechanism reports whether m is empty (no SASL) or one of
// SASLMechanisms.
func ValidSASLMechanism(m string) bool { return m == "" || slices.Contains(SASLMechanisms, m) }

// SASLMechanismsText is SASLMechanisms as errors and help texts name them.
const SASLMechanismsText = "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"

// SASLUserError is the error of a user name or password a SCRAM library
// refused (it failed SASLprep): it repeats neither.
const SASLUserError = "INBOXD_KAFKA_SASL_USERNAME/INBOXD_KAFKA_SASL_PASSWORD: not usable for SCRAM (SASLprep failed)"

// SASL is the SASL settings of a connection to Kafka brokers. The public
// settings (ingest.SASLConfig) have the same fields and convert to it.
type SASL struct {
	// Mechanism is empty (no SASL) or one of SASLMechanisms.
	Mechanism string
	// Username is the SASL user name.
	Username string
	// Password is the SASL password. It is never logged or printed.
	Password string
}

// String describes the SASL settings without the password.
func (s SASL) String() string {
	if s.Mechanism == "" {
		return "none"
	}
	return fmt.Sprintf("%s user=%s password=[redacted]", s.Mechanism, s.Username)
}

// DefaultClientID is the client id a Kafka client sends to the brokers
// when none is configured.
const DefaultClientID = "inboxd"
