package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The RabbitMQ variables: the URL (or its file) with queues runs the
// source; each bad setting is one line naming its variable; the URL's
// password appears neither in errors nor in the printed configuration.
func TestAMQPVariables(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "amqp-url")
	if err := os.WriteFile(file, []byte("amqp://u:s3cretpw@rabbit:5672/vh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{dsn, "INBOXD_AMQP_URL_FILE=" + file, "INBOXD_AMQP_QUEUES=orders, ,audit", "INBOXD_AMQP_PREFETCH=50"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.AMQPEnabled() || c.AMQPURL != "amqp://u:s3cretpw@rabbit:5672/vh" || strings.Join(c.AMQPQueues, ",") != "orders,audit" || c.AMQPPrefetch != 50 {
		t.Fatalf("AMQP settings: %v", c)
	}
	for _, s := range []string{c.String(), fmt.Sprintf("%#v", c)} {
		if strings.Contains(s, "s3cretpw") {
			t.Errorf("printed configuration holds the password: %s", s)
		}
		if !strings.Contains(s, "amqp://u@rabbit:5672/vh") {
			t.Errorf("printed configuration lacks the redacted URL: %s", s)
		}
	}

	_, err = Load([]string{dsn, "INBOXD_AMQP_URL=http://u:s3cretpw@rabbit/", "INBOXD_AMQP_PREFETCH=70000",
		"INBOXD_AMQP_TLS_CERT_FILE=c.pem"})
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	for _, want := range []string{"INBOXD_AMQP_URL: is not a valid", "INBOXD_AMQP_QUEUES: is required", "INBOXD_AMQP_PREFETCH: must be",
		"INBOXD_AMQP_TLS_CERT_FILE: and INBOXD_AMQP_TLS_KEY_FILE"} {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, want)
		}
		if !found {
			t.Errorf("no line %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "s3cretpw") {
		t.Errorf("error holds the password: %v", err)
	}
	if _, err := Load([]string{dsn, "INBOXD_AMQP_QUEUES=orders"}); err == nil || !strings.Contains(err.Error(), "INBOXD_AMQP_URL: is required") {
		t.Errorf("queues without a URL: %v", err)
	}
}
