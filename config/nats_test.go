package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The NATS variables: the URL (or its file) with streams runs the source;
// each bad setting is one line naming its variable; neither a password nor
// a token of the URL appears in errors or in the printed configuration.
func TestNATSVariables(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "nats-url")
	if err := os.WriteFile(file, []byte("nats://u:s3cretpw@n1:4222,nats://t0kensecret@n2:4222\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{dsn, "INBOXD_NATS_URL_FILE=" + file, "INBOXD_NATS_STREAMS=ORDERS, ,AUDIT",
		"INBOXD_NATS_SUBJECTS=orders.*", "INBOXD_NATS_CREDS_FILE=/etc/nats/user.creds"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.NATSEnabled() || c.NATSURL != "nats://u:s3cretpw@n1:4222,nats://t0kensecret@n2:4222" ||
		strings.Join(c.NATSStreams, ",") != "ORDERS,AUDIT" || c.NATSConsumer != "inboxd" ||
		strings.Join(c.NATSSubjects, ",") != "orders.*" || c.NATSCredsFile != "/etc/nats/user.creds" {
		t.Fatalf("NATS settings: %v", c)
	}
	for _, s := range []string{c.String(), fmt.Sprintf("%#v", c)} {
		if strings.Contains(s, "s3cretpw") || strings.Contains(s, "t0kensecret") {
			t.Errorf("printed configuration holds a secret: %s", s)
		}
		if !strings.Contains(s, "nats://u@n1:4222,nats://%5Bredacted%5D@n2:4222") {
			t.Errorf("printed configuration lacks the redacted URL: %s", s)
		}
	}

	_, err = Load([]string{dsn, "INBOXD_NATS_URL=http://u:s3cretpw@n1/", "INBOXD_NATS_CONSUMER=a.b",
		"INBOXD_NATS_TLS_CERT_FILE=c.pem"})
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	for _, want := range []string{"INBOXD_NATS_URL: is not a valid", "INBOXD_NATS_STREAMS: is required", "INBOXD_NATS_CONSUMER: \"a.b\" is not",
		"INBOXD_NATS_TLS_CERT_FILE: and INBOXD_NATS_TLS_KEY_FILE"} {
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
	if _, err := Load([]string{dsn, "INBOXD_NATS_STREAMS=ORDERS"}); err == nil || !strings.Contains(err.Error(), "INBOXD_NATS_URL: is required") {
		t.Errorf("streams without a URL: %v", err)
	}
	if _, err := Load([]string{dsn, "INBOXD_NATS_URL=nats://h", "INBOXD_NATS_STREAMS=a.b"}); err == nil ||
		!strings.Contains(err.Error(), `INBOXD_NATS_STREAMS: stream name "a.b" is not valid`) {
		t.Errorf("bad stream name: %v", err)
	}
}
