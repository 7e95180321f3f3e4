package amqp

import (
	"context"
	"testing"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/amqpmap"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/inboxd/inboxd/internal/ingestcore/natsmap"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
	"github.com/segmentio/kafka-go"
)

// The helpers every source's tests share (written once per package of
// ingest/: test files cannot be imported).

// waitFor polls cond until it reports true, failing the test after timeout
// with cond's last report.
var waitFor = testkit.WaitForReport

// inboxRow is a row as read back from the inbox table.
type inboxRow struct {
	Source, EventID, EventType, Status string
	Key, Payload                       []byte
	Headers                            map[string]any
	LastError                          *string
	Topic                              *string
	Partition                          *int32
	Offset                             *int64
	Attempts                           int
}

func readRows(t *testing.T, db *pgtest.DB) map[string]inboxRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT source, event_id, event_type, status, key, payload, headers, last_error,
		       kafka_topic, kafka_partition, kafka_offset, attempts
		FROM inbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]inboxRow{}
	for rows.Next() {
		var r inboxRow
		if err := rows.Scan(&r.Source, &r.EventID, &r.EventType, &r.Status, &r.Key, &r.Payload, &r.Headers,
			&r.LastError, &r.Topic, &r.Partition, &r.Offset, &r.Attempts); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[r.Source+" "+r.EventID]; dup {
			t.Fatalf("two rows for %s %s", r.Source, r.EventID)
		}
		out[r.Source+" "+r.EventID] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// storedOf is a rejected row as the CLI reads it back (ingestcore.Stored),
// from its event id and its columns as a Kafka message.
func storedOf(eventID string, m kafka.Message) ingestcore.Stored {
	hs := make([]ingestcore.Header, len(m.Headers))
	for i, h := range m.Headers {
		hs[i] = ingestcore.Header(h)
	}
	return ingestcore.Stored{Source: m.Topic, EventID: eventID, Key: m.Key, Payload: m.Value, Headers: hs,
		Partition: m.Partition, Offset: m.Offset}
}

// brokerRemappers are the brokers' remap rules with opts, by kind.
func brokerRemappers(opts ingest.MapOptions) ingestcore.Remappers {
	return ingestcore.Remappers{ingest.SourceKafka: kafkamap.Rule{Opts: opts}, ingest.SourceAMQP: amqpmap.Rule{Opts: opts},
		ingest.SourceNATS: natsmap.Rule{Opts: opts}}
}

// remapRejected maps a rejected row again as `inboxd requeue --status
// rejected` does, by the rules of its kind of broker.
func remapRejected(eventID string, m kafka.Message, opts ingest.MapOptions) ingestcore.Row {
	return brokerRemappers(opts).Remap(storedOf(eventID, m))
}
