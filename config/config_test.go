package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const dsn = "INBOXD_DATABASE_URL=postgres://inboxd:s3cret@db.internal:5432/app?sslmode=disable"

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load([]string{dsn})
	if err != nil {
		t.Fatal(err)
	}
	if c.Workers != 64 || c.MaxAttempts != 10 || c.Lease != 30*time.Second || c.BackoffBase != time.Second ||
		c.BackoffMax != 5*time.Minute || c.KafkaGroup != "inboxd" || c.MaxPayload != 1<<20 || c.MaxHeaders != 64<<10 || c.HTTPAddr != ":8080" {
		t.Fatalf("unexpected defaults: %+v", c.Redacted())
	}
	if c.IngestEnabled() {
		t.Fatal("ingest enabled without brokers")
	}
	if strings.Join(c.EventIDHeaders, ",") != "event_id,ce_id" || strings.Join(c.EventTypeHeaders, ",") != "event_type,ce_type" {
		t.Fatalf("header defaults: %v %v", c.EventIDHeaders, c.EventTypeHeaders)
	}
}

func TestEmptyHTTPAddrDisablesTheServer(t *testing.T) {
	t.Parallel()
	c, err := Load([]string{dsn, "INBOXD_HTTP_ADDR="})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "" {
		t.Fatalf("HTTPAddr = %q, want empty (disabled)", c.HTTPAddr)
	}
}

func TestParsesValues(t *testing.T) {
	t.Parallel()
	c, err := Load([]string{dsn,
		"INBOXD_KAFKA_BROKERS= k1:9092, k2:9092 ,",
		"INBOXD_KAFKA_TOPICS=orders,payments",
		"INBOXD_WORKERS=8", "INBOXD_LEASE=1m30s", "INBOXD_BACKOFF_BASE=250ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.KafkaBrokers, "|") != "k1:9092|k2:9092" || len(c.KafkaTopics) != 2 || !c.IngestEnabled() {
		t.Fatalf("brokers %q topics %q", c.KafkaBrokers, c.KafkaTopics)
	}
	if c.Workers != 8 || c.Lease != 90*time.Second || c.BackoffBase != 250*time.Millisecond {
		t.Fatalf("parsed %d %s %s", c.Workers, c.Lease, c.BackoffBase)
	}
}

func TestValidationNamesTheVariable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  string
		want string
	}{
		{"INBOXD_WORKERS=0", "INBOXD_WORKERS: must be between 1 and 10000, got 0"},
		{"INBOXD_WORKERS=lots", "INBOXD_WORKERS: not a whole number"},
		{"INBOXD_MAX_ATTEMPTS=0", "INBOXD_MAX_ATTEMPTS: must be between 1 and 1000"},
		{"INBOXD_LEASE=10ms", `INBOXD_LEASE: must be at least 100ms, got "10ms"`},
		{"INBOXD_LEASE=soon", "INBOXD_LEASE: not a duration"},
		{"INBOXD_BACKOFF_MAX=1ms", "INBOXD_BACKOFF_MAX: must be at least INBOXD_BACKOFF_BASE"},
		{"INBOXD_POLL_INTERVAL=1h", "INBOXD_POLL_INTERVAL: must be at most 1m"},
		{"INBOXD_PREFETCH=-2", "INBOXD_PREFETCH: must be -1 (none), 0 (automatic) or up to 100000"},
		{"INBOXD_CLAIM_BATCH=0", "INBOXD_CLAIM_BATCH: must be between 1 and 10000"},
		{"INBOXD_KAFKA_BROKERS=k1", "INBOXD_KAFKA_TOPICS: is required when INBOXD_KAFKA_BROKERS is set"},
		{"INBOXD_KAFKA_START_OFFSET=middle", "INBOXD_KAFKA_START_OFFSET: must be first or last"},
		{"INBOXD_KAFKA_SASL_MECHANISM=GSSAPI", "INBOXD_KAFKA_SASL_MECHANISM: must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"INBOXD_KAFKA_SASL_MECHANISM=PLAIN", "INBOXD_KAFKA_SASL_USERNAME: is required"},
		{"INBOXD_KAFKA_TLS_CERT_FILE=/c.pem", "INBOXD_KAFKA_TLS_CERT_FILE: and INBOXD_KAFKA_TLS_KEY_FILE must be set together"},
		{"INBOXD_KAFKA_TLS=maybe", "INBOXD_KAFKA_TLS: not a boolean"},
		{"INBOXD_MAX_PAYLOAD=10", "INBOXD_MAX_PAYLOAD: must be between 1024 and 33554432 bytes"},
		{"INBOXD_MAX_HEADERS=10", "INBOXD_MAX_HEADERS: must be between 1024 and 1048576 bytes"},
		{"INBOXD_MAX_HEADERS=2097152", "INBOXD_MAX_HEADERS: must be between 1024 and 1048576 bytes"},
		{"INBOXD_INGEST_BATCH_SIZE=0", "INBOXD_INGEST_BATCH_SIZE: must be between 1 and 10000"},
		{"INBOXD_EVENT_ID_HEADERS=,", "INBOXD_EVENT_ID_HEADERS: must name at least one header"},
		{"INBOXD_LOG_LEVEL=loud", "INBOXD_LOG_LEVEL: must be debug, info, warn or error"},
		{"INBOXD_LOG_FORMAT=xml", "INBOXD_LOG_FORMAT: must be json, text or auto"},
		{"INBOXD_STATEMENT_TIMEOUT=0s", "INBOXD_STATEMENT_TIMEOUT: must be at least 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			t.Parallel()
			_, err := Load([]string{dsn, tt.env})
			if err == nil {
				t.Fatalf("accepted %s", tt.env)
			}
			lines := strings.Split(err.Error(), "\n")
			found := false
			for _, l := range lines {
				if strings.HasPrefix(l, tt.want) {
					found = true
				}
			}
			if !found {
				t.Fatalf("error lines %q lack one starting %q", lines, tt.want)
			}
		})
	}
}

func TestDatabaseURLRequiredAndNeverEchoed(t *testing.T) {
	t.Parallel()
	_, err := Load(nil)
	if err == nil || !strings.HasPrefix(err.Error(), "INBOXD_DATABASE_URL: is required") {
		t.Fatalf("missing url: %v", err)
	}
	_, err = Load([]string{"INBOXD_DATABASE_URL=postgres://u:hunter2@h:badport/db"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad url error must not echo it: %v", err)
	}
}

func TestSecretsFromFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "url")
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(urlFile, []byte("postgres://inboxd:fromfile@db:5432/app\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte("kafka-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{
		"INBOXD_DATABASE_URL_FILE=" + urlFile,
		"INBOXD_KAFKA_SASL_MECHANISM=SCRAM-SHA-512", "INBOXD_KAFKA_SASL_USERNAME=svc",
		"INBOXD_KAFKA_SASL_PASSWORD_FILE=" + pwFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://inboxd:fromfile@db:5432/app" || c.KafkaSASLPassword != "kafka-secret" {
		t.Fatalf("secrets not read from files (trailing newline must be dropped)")
	}
	_, err = Load([]string{"INBOXD_DATABASE_URL_FILE=" + filepath.Join(dir, "missing")})
	if err == nil || !strings.HasPrefix(err.Error(), "INBOXD_DATABASE_URL_FILE: cannot read") {
		t.Fatalf("missing secret file: %v", err)
	}
	// A secret file is small: one that is not (a path mistyped into a log
	// or a device) is refused, not read whole into memory.
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxSecretFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{big, "/dev/zero"} {
		_, err = Load([]string{"INBOXD_DATABASE_URL_FILE=" + path})
		if err == nil || !strings.Contains(err.Error(), "INBOXD_DATABASE_URL_FILE: cannot read the file it names: larger than") {
			t.Fatalf("secret file %s: %v", path, err)
		}
		if strings.Contains(err.Error(), path) {
			t.Fatalf("the error repeats the variable's value: %v", err)
		}
	}
}

func TestRedactedAndPoolConfig(t *testing.T) {
	t.Parallel()
	c, err := Load([]string{dsn, "INBOXD_WORKERS=40", "INBOXD_STATEMENT_TIMEOUT=15s"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Redacted(); strings.Contains(got, "s3cret") || got != "postgres://inboxd@db.internal:5432/app" {
		t.Fatalf("Redacted() = %q", got)
	}
	engine, tx := c.PoolSizes()
	if engine != EngineConns || tx != 40/4 {
		t.Fatalf("pool sizes = %d engine + %d tx, want %d + 10", engine, tx, EngineConns)
	}
	pc, err := c.PoolConfig("inboxd", engine)
	if err != nil {
		t.Fatal(err)
	}
	rp := pc.ConnConfig.RuntimeParams
	if rp["statement_timeout"] != "15000" || rp["idle_in_transaction_session_timeout"] != "60000" || rp["application_name"] != "inboxd" ||
		rp["jit"] != "off" {
		t.Fatalf("runtime params = %v", rp)
	}
	// A URL's own jit setting is kept.
	cj, err := Load([]string{dsn + "&jit=on"})
	if err != nil {
		t.Fatal(err)
	}
	if pj, err := cj.PoolConfig("inboxd", 1); err != nil || pj.ConnConfig.RuntimeParams["jit"] != "on" {
		t.Fatalf("jit=on in the URL: %v, %v", pj, err)
	}
	if pc.MaxConns != EngineConns {
		t.Fatalf("MaxConns = %d", pc.MaxConns)
	}
	// An explicit total keeps the engine's share and gives handlers the rest;
	// a total that leaves handlers nothing is refused, naming the variable.
	c2, err := Load([]string{dsn, "INBOXD_DATABASE_MAX_CONNS=20"})
	if err != nil {
		t.Fatal(err)
	}
	if engine, tx := c2.PoolSizes(); engine != EngineConns || tx != 20-EngineConns {
		t.Fatalf("pool sizes with a total of 20 = %d + %d", engine, tx)
	}
	if _, err := Load([]string{dsn, "INBOXD_DATABASE_MAX_CONNS=8"}); err == nil ||
		!strings.HasPrefix(err.Error(), "INBOXD_DATABASE_MAX_CONNS:") {
		t.Fatalf("a total of 8 = %v, want an error naming INBOXD_DATABASE_MAX_CONNS", err)
	}
}
