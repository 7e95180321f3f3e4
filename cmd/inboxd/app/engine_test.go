package app

import (
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/worker"
)

func TestEngineConfigFromEnvironment(t *testing.T) {
	t.Parallel()
	c, err := config.Load([]string{
		"INBOXD_DATABASE_URL=postgres://u:pw@db/inbox",
		"INBOXD_KAFKA_BROKERS=k1:9092,k2:9092",
		"INBOXD_KAFKA_TOPICS=orders,payments",
		"INBOXD_KAFKA_GROUP=g",
		"INBOXD_KAFKA_START_OFFSET=last",
		"INBOXD_KAFKA_SESSION_TIMEOUT=12s",
		"INBOXD_INGEST_BATCH_SIZE=200",
		"INBOXD_INGEST_BATCH_TIMEOUT=10ms",
		"INBOXD_INGEST_BATCH_BYTES=4096",
		"INBOXD_MAX_PAYLOAD=2048",
		"INBOXD_MAX_HEADERS=4096",
		"INBOXD_EVENT_ID_JSON_FIELD=id",
		"INBOXD_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"INBOXD_KAFKA_SASL_USERNAME=svc",
		"INBOXD_KAFKA_SASL_PASSWORD=hunter2",
		"INBOXD_WORKERS=12",
		"INBOXD_CLAIM_BYTES=65536",
		"INBOXD_STATEMENT_TIMEOUT=7s",
		"INBOXD_BACKOFF_BASE=2s",
		"INBOXD_BACKOFF_MAX=1m",
	})
	if err != nil {
		t.Fatal(err)
	}
	in := ingestConfig(c)
	if strings.Join(in.Brokers, ",") != "k1:9092,k2:9092" || strings.Join(in.Topics, ",") != "orders,payments" ||
		in.Group != "g" || !in.StartFromLatest || in.SessionTimeout != 12*time.Second ||
		in.BatchSize != 200 || in.BatchTimeout != 10*time.Millisecond || in.BatchBytes != 4096 ||
		in.Mapping.MaxPayload != 2048 || in.Mapping.MaxHeaders != 4096 || in.Mapping.EventIDJSONField != "id" ||
		strings.Join(in.Mapping.EventIDHeaders, ",") != "event_id,ce_id" ||
		in.SASL.Mechanism != "SCRAM-SHA-512" || in.SASL.Password != "hunter2" {
		t.Errorf("ingest config = %+v", in)
	}
	if s := in.SASL.String(); strings.Contains(s, "hunter2") {
		t.Errorf("SASLConfig.String shows the password: %s", s)
	}
	w := workerConfig(c)
	policy, ok := w.RetryPolicy.(worker.ExponentialBackoff)
	if w.Workers != 12 || w.ClaimBytes != 65536 || w.StatementTimeout != 7*time.Second || !ok ||
		policy.Base != 2*time.Second || policy.Max != time.Minute || w.MaxRetryDelay != time.Minute {
		t.Errorf("worker config = %+v", w)
	}
	if engine, tx := c.PoolSizes(); engine != config.EngineConns || tx != 3 {
		t.Errorf("pool sizes = %d engine + %d tx, want %d + max(2, 12/4)", engine, tx, config.EngineConns)
	}
}
