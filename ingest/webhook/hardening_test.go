package webhook

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/netfault"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their files and a pool trusting the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// With a certificate and key the listener serves HTTPS only, and a signed
// request over it is stored.
func TestWebhookServesTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, roots := selfSigned(t)
	b := setupWebhook(t, nil, func(c *Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile })
	body := []byte(`{"type":"t"}`)
	u := "https://" + b.src.Addr() + PathPrefix + "std"
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = stdRequest(t, "tls-1", body, time.Now())
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("over TLS: %d (TLS %v), want 200 over TLS", resp.StatusCode, resp.TLS != nil)
	}
	if n := b.count(t, "source = 'std' AND event_id = 'tls-1'"); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
	// Plain HTTP to the TLS listener is not served.
	plain, err := http.Post("http://"+b.src.Addr()+PathPrefix+"std", "application/json", bytes.NewReader(body))
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP answered 200 on the TLS listener")
		}
	}
}

// Over the concurrency cap a request is answered 503 at once (it is not
// queued); a slow client that never finishes its headers is cut off after
// the read-header timeout.
func TestWebhookCapsRequestsAndSlowClients(t *testing.T) {
	t.Parallel()
	pool, proxy := proxiedPool(t)
	b := setupWebhook(t, pool, func(c *Config) {
		c.MaxRequests = 1
		c.WriteTimeout = 3 * time.Second
		c.ReadHeaderTimeout = 300 * time.Millisecond
	})
	// The database stalls: the first request waits for its commit.
	proxy.Cut()
	first := make(chan int, 1)
	go func() {
		body := []byte(`{"type":"t"}`)
		resp, _ := b.post(t, "std", stdRequest(t, "cap-1", body, time.Now()), body)
		first <- resp.StatusCode
	}()
	// Wait until the first one holds the only place.
	deadline := time.Now().Add(5 * time.Second)
	var second int
	for time.Now().Before(deadline) {
		body := []byte(`{"type":"t"}`)
		start := time.Now()
		resp, _ := b.post(t, "std", stdRequest(t, "cap-2", body, time.Now()), body)
		if resp.StatusCode == http.StatusServiceUnavailable && time.Since(start) < time.Second {
			second = resp.StatusCode
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if second != http.StatusServiceUnavailable {
		t.Fatal("no request answered 503 at once while another held the only place")
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	<-first

	// A client that sends half a request line and then nothing.
	conn, err := net.Dial("tcp", b.src.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprint(conn, "POST /webhooks/std HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	_, err = io.ReadAll(conn) // the server closes the connection
	if took := time.Since(start); err != nil || took > 5*time.Second {
		t.Fatalf("slow client: the connection stayed open %s (%v); want it closed after the 300ms read-header timeout", took, err)
	}
}

// proxiedPool is a pool on a test database of its own reached through a
// netfault proxy, to cut the database off under a running source.
func proxiedPool(t *testing.T) (*pgxpool.Pool, *netfault.Proxy) {
	t.Helper()
	db := pgtest.New(t)
	pu, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.New(pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	u, err := proxy.Rewrite(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, proxy
}
