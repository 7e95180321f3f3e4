package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/driver/status"
)

// NewRow is one row ingest writes: a message mapped to the inbox's columns.
type NewRow struct {
	// Source is the topic (stored as source and kafka_topic); with EventID
	// it is the row's unique key.
	Source string
	// EventID is the producer's event id (or the message's position for a
	// rejected row).
	EventID string
	// EventType is the event type ("" for a rejected row of unknown type).
	EventType string
	// Key is the message key; nil is stored as NULL.
	Key []byte
	// Payload is the message value, stored byte for byte.
	Payload []byte
	// Headers is the JSON object stored in the headers column.
	Headers []byte
	// Status is status.Received or status.Rejected.
	Status status.Status
	// LastError explains a rejection; "" is stored as NULL.
	LastError string
	// Kafka reports a message from Kafka: Source is its topic and
	// Partition and Offset its position (kafka_topic, kafka_partition,
	// kafka_offset). Other sources' rows leave those columns NULL.
	Kafka     bool
	Partition int32
	Offset    int64
}

var insertBatchSQL = load("insert_batch.sql")

// InsertBatch writes rows in one statement (so one transaction: all or
// none), skipping each row whose (source, event_id) is already in the
// inbox, and returns how many rows it inserted (sql/insert_batch.sql).
func InsertBatch(ctx context.Context, db DB, rows []NewRow) (inserted int, err error) {
	n := len(rows)
	var (
		sources    = make([]string, n)
		eventIDs   = make([]string, n)
		eventTypes = make([]string, n)
		keys       = make([][]byte, n)
		payloads   = make([][]byte, n)
		headers    = make([]string, n)
		statuses   = make([]string, n)
		lastErrors = make([]string, n)
		partitions = make([]int32, n)
		offsets    = make([]int64, n)
		kafka      = make([]bool, n)
	)
	for i, r := range rows {
		sources[i] = r.Source
		eventIDs[i] = r.EventID
		eventTypes[i] = r.EventType
		keys[i] = r.Key
		payloads[i] = r.Payload
		headers[i] = string(r.Headers)
		statuses[i] = string(r.Status)
		lastErrors[i] = r.LastError
		partitions[i] = r.Partition
		offsets[i] = r.Offset
		kafka[i] = r.Kafka
	}
	tag, err := db.Exec(ctx, insertBatchSQL, sources, eventIDs, eventTypes, keys, payloads,
		headers, statuses, lastErrors, partitions, offsets, kafka)
	if err != nil {
		return 0, fmt.Errorf("insert batch of %d rows: %w", n, err)
	}
	return int(tag.RowsAffected()), nil
}

// IdentityClash reports whether err, from InsertBatch, is a unique
// violation on the inbox's primary key: ids drawn from the identity
// sequence that a third party had already used explicitly. The sequence
// values the failed statement drew are spent, so the same rows succeed
// once the sequence has passed the taken ids; the data is not at fault.
func IdentityClash(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == uniqueViolation && pgErr.ConstraintName == "inbox_pkey"
}

// uniqueViolation is SQLSTATE 23505.
const uniqueViolation = "23505"
