// Package ingesttest holds the helpers the sources' tests share (test
// files cannot be imported from another package): running a source for a
// test, reading the inbox back, a rejected row as the CLI reads it, the
// brokers' remap rules.
package ingesttest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/amqpmap"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/inboxd/inboxd/internal/ingestcore/natsmap"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
)

// StartSource runs a source (its Run) until the test ends or stop is
// called; stop returns Run's error.
func StartSource(t testing.TB, run func(context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = errors.New("the source's Run did not return within 30s of cancellation")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return stop
}

// InboxRow is a row as read back from the inbox table.
type InboxRow struct {
	Source, EventID, EventType, Status string
	Key, Payload                       []byte
	Headers                            map[string]any
	LastError                          *string
	Topic                              *string
	Partition                          *int32
	Offset                             *int64
	Attempts                           int
}

func ReadRows(t *testing.T, db *pgtest.DB) map[string]InboxRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT source, event_id, event_type, status, key, payload, headers, last_error,
		       kafka_topic, kafka_partition, kafka_offset, attempts
		FROM inbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]InboxRow{}
	for rows.Next() {
		var r InboxRow
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

func Deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// StoredOf is a rejected row as the CLI reads it back (ingestcore.Stored),
// from its event id and its columns as a Kafka message.
func StoredOf(eventID string, m kafka.Message) ingestcore.Stored {
	hs := make([]ingestcore.Header, len(m.Headers))
	for i, h := range m.Headers {
		hs[i] = ingestcore.Header(h)
	}
	return ingestcore.Stored{Source: m.Topic, EventID: eventID, Key: m.Key, Payload: m.Value, Headers: hs,
		Partition: m.Partition, Offset: m.Offset}
}

// BrokerRemappers are the brokers' remap rules with opts, by kind.
func BrokerRemappers(opts ingest.MapOptions) ingestcore.Remappers {
	return ingestcore.Remappers{ingest.SourceKafka: kafkamap.Rule{Opts: opts}, ingest.SourceAMQP: amqpmap.Rule{Opts: opts},
		ingest.SourceNATS: natsmap.Rule{Opts: opts}}
}

// SyncBuffer is a bytes.Buffer safe for a logger's goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLogger logs to t at info level.
func TestLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
}
