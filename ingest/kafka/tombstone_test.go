package kafka

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// headersOf decodes a row's headers column.
func headersOf(t *testing.T, row ingestcore.Row) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(row.Headers, &obj); err != nil {
		t.Fatalf("headers %q: %v", row.Headers, err)
	}
	return obj
}

// A tombstone (a message with a nil value, the delete marker of a compacted
// topic) was stored as an empty payload, like an empty value: a handler could
// not tell them apart. It now carries the header inboxd-tombstone: true,
// which only ingest sets.
func TestMapMessageMarksTombstones(t *testing.T) {
	t.Parallel()
	id := hdrs("event_id", "e1", "event_type", "user.changed")
	tests := []struct {
		name      string
		value     []byte
		headers   []kafka.Header
		tombstone bool
	}{
		{"tombstone", nil, id, true},
		{"empty value", []byte{}, id, false},
		{"value", []byte(`{"a":1}`), id, false},
		{"tombstone with the header sent as false", nil, append(hdrs(ingest.TombstoneHeader, "false"), id...), true},
		{"value with the header forged", []byte("x"), append(hdrs(ingest.TombstoneHeader, "true"), id...), false},
		{"rejected tombstone", nil, hdrs("event_type", "user.changed"), true},
	}
	for _, tt := range tests {
		row := kafkamap.MapMessage(kafka.Message{Topic: "users", Key: []byte("u1"), Value: tt.value, Headers: tt.headers}, ingest.MapOptions{})
		if row.Payload == nil || len(row.Payload) != len(tt.value) {
			t.Errorf("%s: payload %q", tt.name, row.Payload)
		}
		hs := headersOf(t, row)
		v, ok := hs[ingest.TombstoneHeader]
		switch {
		case tt.tombstone && v != "true":
			t.Errorf("%s: headers %s, want %s: true", tt.name, row.Headers, ingest.TombstoneHeader)
		case !tt.tombstone && ok:
			t.Errorf("%s: headers %s, want no %s", tt.name, row.Headers, ingest.TombstoneHeader)
		}
		if hs["event_id"] == nil && tt.name != "rejected tombstone" {
			t.Errorf("%s: headers %s lost the message's own", tt.name, row.Headers)
		}
	}
}

// Through Kafka (kfake and the consumer): a tombstone's row has the header.
// segmentio/kafka-go (v0.4.51) hands a zero-length value over as nil, like a
// null one, so an empty value is marked too: the documented limitation this
// test pins (should the client learn the difference, docs/sources.md must change
// with it).
func TestIngestMarksTombstones(t *testing.T) {
	t.Parallel()
	b := setupKafka(t, 1)
	tomb := b.event(0, "e1", "user.deleted", nil)
	tomb.Key = []byte("u1")
	empty := b.event(0, "e2", "user.changed", []byte{})
	value := b.event(0, "e3", "user.changed", []byte(`{"name":"a"}`))
	forged := b.event(0, "e4", "user.changed", []byte(`{"name":"b"}`))
	forged.Headers = append(forged.Headers, kgo.RecordHeader{Key: ingest.TombstoneHeader, Value: []byte("true")})
	b.produce(t, tomb, empty, value, forged)

	b.start(t, b.config(), "c1")
	b.waitCommitted(t, 30*time.Second)
	rows := readRows(t, b.db)
	for id, want := range map[string]bool{"e1": true, "e2": true, "e3": false, "e4": false} {
		r, ok := rows["orders "+id]
		if !ok {
			t.Fatalf("no row %s: %v", id, rows)
		}
		if got := r.Headers[ingest.TombstoneHeader] == "true"; got != want || r.Status != ingestcore.StatusReceived {
			t.Errorf("row %s: status %s, headers %v; want tombstone %v", id, r.Status, r.Headers, want)
		}
	}
}
