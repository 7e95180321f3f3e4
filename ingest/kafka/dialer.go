package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/brokers"
)

// newDialer builds the kafka-go dialer used for every broker connection,
// with TLS and SASL as configured.
func newDialer(c Config) (*kafka.Dialer, error) {
	tlsConfig, err := buildTLS(c.TLS)
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

// buildTLS returns the TLS client configuration, or nil when TLS is off.
// File names appear in errors; file contents never do.
func buildTLS(t ingest.TLSConfig) (*tls.Config, error) {
	return brokers.TLS(t).Build("INBOXD_KAFKA_TLS")
}

// build returns the SASL mechanism, or nil when SASL is off.
func (s SASLConfig) build() (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "":
		return nil, nil
	case brokers.SASLPlain:
		return plain.Mechanism{Username: s.Username, Password: s.Password}, nil
	case brokers.SASLScramSHA256, brokers.SASLScramSHA512:
		algo := scram.SHA256
		if s.Mechanism == brokers.SASLScramSHA512 {
			algo = scram.SHA512
		}
		mech, err := scram.Mechanism(algo, s.Username, s.Password)
		if err != nil {
			// The scram library's error is about the user name or password
			// failing SASLprep; do not echo either.
			return nil, errors.New(brokers.SASLUserError)
		}
		return mech, nil
	default:
		return nil, fmt.Errorf("INBOXD_KAFKA_SASL_MECHANISM: must be %s, got %q", brokers.SASLMechanismsText, s.Mechanism)
	}
}
