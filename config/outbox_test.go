package config

import (
	"strings"
	"testing"
	"time"
)

// With INBOXD_OUTBOX=true a broker without anything to consume publishes
// only; without it, the same settings are an error naming the missing
// variable. The relay's settings are validated one line each.
func TestOutboxVariables(t *testing.T) {
	t.Parallel()
	brokers := []string{dsn, "INBOXD_KAFKA_BROKERS=k1:9092", "INBOXD_AMQP_URL=amqp://u:p@rabbit:5672/", "INBOXD_NATS_URL=nats://n1:4222"}
	_, err := Load(brokers)
	for _, v := range []string{"INBOXD_KAFKA_TOPICS", "INBOXD_AMQP_QUEUES", "INBOXD_NATS_STREAMS"} {
		if err == nil || !strings.Contains(err.Error(), v+": is required") {
			t.Errorf("without the outbox: error %v, want one naming %s", err, v)
		}
	}
	c, err := Load(append(brokers, "INBOXD_OUTBOX=true"))
	if err != nil {
		t.Fatalf("publish only: %v", err)
	}
	if !c.Outbox || c.IngestEnabled() || c.AMQPEnabled() || c.NATSEnabled() {
		t.Errorf("publish only: outbox %v, sources kafka %v amqp %v nats %v; want the relay and no source",
			c.Outbox, c.IngestEnabled(), c.AMQPEnabled(), c.NATSEnabled())
	}
	if c.OutboxLease != 15*time.Second || c.OutboxBatchSize != 500 || c.OutboxPublishTimeout != 0 {
		t.Errorf("defaults: lease %s, batch %d, publish timeout %s", c.OutboxLease, c.OutboxBatchSize, c.OutboxPublishTimeout)
	}
	if _, err := Load(append(brokers, "INBOXD_OUTBOX=true", "INBOXD_OUTBOX_LEASE=3s")); err != nil {
		t.Errorf("a short lease with the automatic publish timeout: %v", err)
	}

	_, err = Load([]string{dsn, "INBOXD_OUTBOX=true", "INBOXD_OUTBOX_BATCH_SIZE=0", "INBOXD_OUTBOX_LEASE=3s",
		"INBOXD_OUTBOX_PUBLISH_TIMEOUT=2s", "INBOXD_OUTBOX_MAX_ATTEMPTS=0", "INBOXD_OUTBOX_POLL_INTERVAL=0s"})
	if err == nil {
		t.Fatal("bad relay settings accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	for _, v := range []string{"INBOXD_OUTBOX_BATCH_SIZE", "INBOXD_OUTBOX_PUBLISH_TIMEOUT", "INBOXD_OUTBOX_MAX_ATTEMPTS", "INBOXD_OUTBOX_POLL_INTERVAL"} {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, v+":") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines for %s, want 1:\n%v", n, v, err)
		}
	}
}

// INBOXD_OUTBOX_KAFKA_COMPRESSION defaults to a codec every mainstream
// client reads; a codec it does not know is one line naming the variable
// and the codecs it takes.
func TestOutboxKafkaCompression(t *testing.T) {
	t.Parallel()
	base := []string{dsn, "INBOXD_OUTBOX=true", "INBOXD_KAFKA_BROKERS=k1:9092"}
	c, err := Load(base)
	if err != nil {
		t.Fatal(err)
	}
	if c.OutboxKafkaCompression != "gzip" {
		t.Errorf("default codec %q, want gzip", c.OutboxKafkaCompression)
	}
	if c, err := Load(append(base, "INBOXD_OUTBOX_KAFKA_COMPRESSION=none")); err != nil || c.OutboxKafkaCompression != "none" {
		t.Errorf("none: %q, %v", c.OutboxKafkaCompression, err)
	}
	_, err = Load(append(base, "INBOXD_OUTBOX_KAFKA_COMPRESSION=brotli"))
	if err == nil {
		t.Fatal("an unknown codec accepted")
	}
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(l, "INBOXD_OUTBOX_KAFKA_COMPRESSION:") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "none, gzip, snappy, lz4, zstd") || !strings.Contains(lines[0], `"brotli"`) {
		t.Errorf("error %q: want one line naming the variable, the codecs and the value", err)
	}
}
