package ingest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)


func TestConfigValidate(t *testing.T) {
	t.Parallel()
	base := Config{Brokers: []string{"k:9092"}, Topics: []string{"t"}, Group: "g"}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no brokers", func(c *Config) { c.Brokers = nil }, "no Kafka brokers"},
		{"no topics", func(c *Config) { c.Topics = nil }, "no Kafka topics"},
		{"no group", func(c *Config) { c.Group = "" }, "no consumer group"},
		{"no id source", func(c *Config) { c.Mapping.EventIDHeaders = []string{} }, "no event id header"},
		{"backoff inverted", func(c *Config) { c.RetryBackoffMin, c.RetryBackoffMax = time.Second, time.Millisecond }, "retry backoff max"},
		{"TLS files without TLS", func(c *Config) { c.TLS.CAFile = "/ca.pem" }, "INBOXD_KAFKA_TLS is false"},
		{"cert without key", func(c *Config) { c.TLS = TLSConfig{Enabled: true, CertFile: "/c.pem"} }, "set together"},
		{"bad SASL", func(c *Config) { c.SASL.Mechanism = "GSSAPI" }, "SASL mechanism"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := base
			tt.mutate(&c)
			err := c.withDefaults().Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := base.withDefaults().Validate(); err != nil {
		t.Errorf("Validate(minimal) = %v", err)
	}
}

func TestDialerErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("secret-looking contents"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := Config{Brokers: []string{"k:9092"}, Topics: []string{"t"}, Group: "g"}
	for name, tls := range map[string]TLSConfig{
		"missing CA file": {Enabled: true, CAFile: filepath.Join(dir, "absent.pem")},
		"CA file not PEM": {Enabled: true, CAFile: notPEM},
		"bad key pair":    {Enabled: true, CertFile: notPEM, KeyFile: notPEM},
	} {
		c := base
		c.TLS = tls
		_, err := newDialer(c.withDefaults())
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if strings.Contains(err.Error(), "secret-looking") {
			t.Errorf("%s: error shows the file contents: %v", name, err)
		}
		if !strings.Contains(err.Error(), "INBOXD_KAFKA_TLS_") {
			t.Errorf("%s: error does not name the variable: %v", name, err)
		}
	}
	c := base
	c.TLS = TLSConfig{Enabled: true, ServerName: "kafka.internal", InsecureSkipVerify: true}
	c.SASL = SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p"}
	d, err := newDialer(c.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if d.TLS == nil || d.TLS.ServerName != "kafka.internal" || !d.TLS.InsecureSkipVerify || d.SASLMechanism.Name() != "PLAIN" {
		t.Errorf("dialer TLS %+v, SASL %v", d.TLS, d.SASLMechanism)
	}
}
