package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/syncbuf"
)

// selfSignedCert makes a CA-flagged certificate for 127.0.0.1 and writes it
// (PEM) to a file, for a TLS kfake cluster and the consumer's CA file.
func selfSignedCert(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kfake test broker"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"kafka.test"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, caFile
}

// The consumer authenticates with each SASL mechanism, over TLS verified
// against a CA file, and ingests.
func TestTLSAndSASL(t *testing.T) {
	t.Parallel()
	const user, pass = "inboxd", "s3cret-Pa55"
	for _, tt := range []struct {
		mechanism string
		tls       bool
		client    sasl.Mechanism
	}{
		{"SCRAM-SHA-256", true, scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()},
		{"SCRAM-SHA-512", false, scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()},
		{"PLAIN", true, plain.Auth{User: user, Pass: pass}.AsMechanism()},
	} {
		t.Run(fmt.Sprintf("%s tls=%t", tt.mechanism, tt.tls), func(t *testing.T) {
			t.Parallel()
			opts := []kfake.Opt{kfake.EnableSASL(), kfake.Superuser(tt.mechanism, user, pass)}
			clientOpts := []kgo.Opt{kgo.SASL(tt.client)}
			var caFile string
			if tt.tls {
				var cert tls.Certificate
				cert, caFile = selfSignedCert(t)
				opts = append(opts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
				pool := x509.NewCertPool()
				pool.AddCert(cert.Leaf)
				clientOpts = append(clientOpts, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
			}
			b := setupKafkaWith(t, 1, opts, clientOpts)

			cfg := b.config()
			cfg.SASL = SASLConfig{Mechanism: tt.mechanism, Username: user, Password: pass}
			if tt.tls {
				cfg.TLS = ingest.TLSConfig{Enabled: true, CAFile: caFile}
			}
			b.produce(t, b.event(0, "secure-1", "t", []byte("v")))
			r := b.start(t, cfg, "secure")
			b.waitCommitted(t, 30*time.Second)
			if got := b.countRows(t, "inbox"); got != 1 {
				t.Errorf("%d rows, want 1", got)
			}
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A wrong password does not stop Run: the reader keeps retrying and the
// failure is visible in logs and metrics; the password never appears in them.
func TestWrongPasswordKeepsRetryingAndIsNotLogged(t *testing.T) {
	t.Parallel()
	const user, pass, wrong = "inboxd", "right-password", "wrong-password-XYZ"
	b := setupKafkaWith(t, 1,
		[]kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", user, pass)},
		[]kgo.Opt{kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism())})
	cfg := b.config()
	cfg.SASL = SASLConfig{Mechanism: "SCRAM-SHA-256", Username: user, Password: wrong}

	var logs syncbuf.Buffer
	c, err := openKafka(cfg, b.db.Pool, zerolog.New(&logs).Level(zerolog.DebugLevel), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := startConsumer(t, c)
	waitFor(t, 30*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(c.Metrics.FetchErrors)
		return n >= 1, fmt.Sprintf("%v fetch errors", n)
	})
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := logs.String()
	if strings.Contains(out, wrong) || strings.Contains(out, pass) {
		t.Error("a password appears in the logs")
	}
	if !strings.Contains(out, `"component":"ingest"`) || !strings.Contains(out, "fetching from Kafka failed") {
		t.Errorf("no ingest warning about the failing fetch in the logs:\n%s", out)
	}
	if s := fmt.Sprintf("%v %+v %#v", cfg.SASL, cfg, cfg); strings.Contains(s, wrong) {
		t.Errorf("formatting the config shows the password: %s", s)
	}
}

// Kafka unreachable at start: Run neither exits nor loses anything, and
// ingests once the broker comes up.
func TestKafkaUnreachableAtStart(t *testing.T) {
	t.Parallel()
	// Reserve a port, then free it for the cluster to come.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	b := &kafkaBundle{topic: "orders", group: "inboxd-test", brokers: []string{fmt.Sprintf("127.0.0.1:%d", port)}}
	b.db = setupDB(t)
	var logs syncbuf.Buffer
	c, err := openKafka(b.config(), b.db.Pool, zerolog.New(&logs), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startConsumer(t, c)
	waitFor(t, 30*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(c.Metrics.FetchErrors)
		return n >= 1 && strings.Contains(logs.String(), `"level":"warn"`), fmt.Sprintf("%v fetch errors, logs %s", n, logs.String())
	})
	waitFor(t, 30*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(c.Metrics.BrokerErrors)
		return n >= 2, fmt.Sprintf("%v failed broker probes", n)
	})
	// Unreachable brokers: not ready (it was 1 before).
	if c.Ready() || testutil.ToFloat64(c.Metrics.Ready) != 0 {
		t.Fatal("ingest reports ready while no broker can be reached")
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(2, b.topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	b.producer = newKgo(t, b.brokers)
	b.admin = kadm.NewClient(b.producer)
	b.produce(t, b.event(0, "late-1", "t", []byte("v")), b.event(1, "late-2", "t", []byte("v")))
	b.waitCommitted(t, 60*time.Second)
	if got := b.countRows(t, "inbox"); got != 2 {
		t.Errorf("%d rows, want 2", got)
	}
	waitFor(t, 10*time.Second, func() (bool, string) { return c.Ready(), "ready once the brokers answer" })
}
