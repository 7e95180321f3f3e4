package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// insertBatchSQL is sql/insert_batch.sql without ([0]) and with ([1]) the
// reservations of the rows handed off at ingest.
var insertBatchSQL = [2]string{
	render("insert_batch.sql", struct{ Reserve bool }{false}),
	render("insert_batch.sql", struct{ Reserve bool }{true}),
}

// Reservation is what a batch's rows handed off at ingest are reserved
// with (migration 013): the lease a claim would have given them. Pos has
// one element per row of the batch: the row's place in the reservation,
// from 1 (stored as claim_pos), or 0 for a row that is not handed off.
type Reservation struct {
	// Token is the lease token of every reserved row.
	Token int64
	// Lease is how long the reservation lasts unless renewed.
	Lease time.Duration
	// Worker is the reserving worker's id (locked_by).
	Worker string
	// Pos is each row's place in the reservation (0: not reserved).
	Pos []int32
}

// Reserved is one reserved row as the insert wrote it.
type Reserved struct {
	// Pos is its place in the Reservation, from 1.
	Pos int32
	// ID is its inbox id.
	ID int64
	// ReceivedAt is its received_at.
	ReceivedAt time.Time
}

// InsertBatch writes rows in one statement (so one transaction: all or
// none), skipping each row whose (source, event_id) is already in the
// inbox, and returns how many rows it inserted (sql/insert_batch.sql).
// With res, the rows res.Pos marks are written reserved for the
// reserving worker, and those inserted are returned in res.Pos order; a
// duplicate is not inserted, so not returned. The result is read in full,
// so the statement has committed when InsertBatch returns without an
// error.
func InsertBatch(ctx context.Context, db DB, rows []NewRow, res *Reservation) (inserted int, reserved []Reserved, err error) {
	n := len(rows)
	var (
		sources    = make([]string, n)
		eventIDs   = make([]string, n)
		eventTypes = make([]string, n)
		keys       = make([][]byte, n)
		payloads   = make([][]byte, n)
		headers    = make([][]byte, n) // text[] from bytes: no copy per row as string(r.Headers) made
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
		headers[i] = r.Headers
		statuses[i] = string(r.Status)
		lastErrors[i] = r.LastError
		partitions[i] = r.Partition
		offsets[i] = r.Offset
		kafka[i] = r.Kafka
	}
	if res == nil {
		tag, err := db.Exec(ctx, insertBatchSQL[0], sources, eventIDs, eventTypes, keys, payloads,
			headers, statuses, lastErrors, partitions, offsets, kafka)
		if err != nil {
			return 0, nil, fmt.Errorf("insert batch of %d rows: %w", n, err)
		}
		return int(tag.RowsAffected()), nil, nil
	}
	var (
		count int64
		ids   []int64
		pos   []int32
		at    []time.Time
	)
	err = db.QueryRow(ctx, insertBatchSQL[1], sources, eventIDs, eventTypes, keys, payloads,
		headers, statuses, lastErrors, partitions, offsets, kafka,
		res.Pos, res.Token, res.Lease.Milliseconds(), res.Worker).Scan(&count, &ids, &pos, &at)
	if err != nil {
		return 0, nil, fmt.Errorf("insert batch of %d rows: %w", n, err)
	}
	if len(ids) != len(pos) || len(ids) != len(at) {
		return 0, nil, fmt.Errorf("insert batch of %d rows: %d reserved ids, %d places, %d times", n, len(ids), len(pos), len(at))
	}
	reserved = make([]Reserved, len(ids))
	for i := range ids {
		reserved[i] = Reserved{Pos: pos[i], ID: ids[i], ReceivedAt: at[i]}
	}
	return int(count), reserved, nil
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
