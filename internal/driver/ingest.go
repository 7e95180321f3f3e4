package driver

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

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

// insertBatchSQL is sql/insert_batch.sql, for the unpartitioned ([0]) and
// the partitioned inbox ([1]), each without ([0]) and with ([1]) the
// reservations of the rows handed off at ingest.
var insertBatchSQL = [2][2]string{
	{
		render("insert_batch.sql", struct{ Reserve, Gen bool }{false, false}),
		render("insert_batch.sql", struct{ Reserve, Gen bool }{true, false}),
	},
	{
		render("insert_batch.sql", struct{ Reserve, Gen bool }{false, true}),
		render("insert_batch.sql", struct{ Reserve, Gen bool }{true, true}),
	},
}

// partitioned says, per database (shapeKey), which conflict target
// InsertBatch names: the unpartitioned inbox's (source, event_id), or the
// partitioned one's (source, event_id, gen). It is learnt from the
// database: a statement that names the other shape's target fails with
// SQLSTATE 42P10 before it writes anything, and is sent again with the
// other.
var partitioned sync.Map // shapeKey → *atomic.Bool

// noConflictTarget is SQLSTATE 42P10: no unique index matches the ON
// CONFLICT target (the inbox changed shape).
const noConflictTarget = "42P10"

// shapeOf is the flag of db's database.
func shapeOf(db DB) *atomic.Bool {
	k := shapeKey(db)
	if v, ok := partitioned.Load(k); ok {
		return v.(*atomic.Bool)
	}
	v, _ := partitioned.LoadOrStore(k, new(atomic.Bool))
	return v.(*atomic.Bool)
}

// shapeKey names db's database: host, port and name.
func shapeKey(db DB) string {
	var c *pgx.ConnConfig
	switch d := db.(type) {
	case *pgxpool.Pool:
		c = d.Config().ConnConfig
	case *pgxpool.Conn:
		c = d.Conn().Config()
	case *pgx.Conn:
		c = d.Config()
	case pgx.Tx:
		c = d.Conn().Config()
	}
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%s:%d/%s", c.Host, c.Port, c.Database)
}

// shapeChanged reports whether err says the inbox changed shape under the
// statement, and if so flips the flag.
func shapeChanged(err error, flag *atomic.Bool, was bool) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != noConflictTarget {
		return false
	}
	flag.CompareAndSwap(was, !was)
	return true
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
		sources    = make(textArray, n)
		eventIDs   = make(textArray, n)
		eventTypes = make(textArray, n)
		keys       = make(byteaArray, n)
		payloads   = make(byteaArray, n)
		headers    = make(bytesTextArray, n) // text[] from bytes: no copy per row as string(r.Headers) made
		statuses   = make(textArray, n)
		lastErrors = make(textArray, n)
		partitions = make(int32Array, n)
		offsets    = make(int64Array, n)
		kafka      = make([]bool, n) // a bool in an interface takes no allocation
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
	shape := shapeOf(db)
	if res == nil {
		var tag pgconn.CommandTag
		for try := 0; ; try++ {
			gen := shape.Load()
			tag, err = db.Exec(ctx, insertBatchSQL[b2i(gen)][0], sources, eventIDs, eventTypes, keys, payloads,
				headers, statuses, lastErrors, partitions, offsets, kafka)
			if try > 0 || !shapeChanged(err, shape, gen) {
				break
			}
		}
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
	for try := 0; ; try++ {
		gen := shape.Load()
		err = db.QueryRow(ctx, insertBatchSQL[b2i(gen)][1], sources, eventIDs, eventTypes, keys, payloads,
			headers, statuses, lastErrors, partitions, offsets, kafka,
			res.Pos, res.Token, res.Lease.Milliseconds(), res.Worker).Scan(&count, &ids, &pos, &at)
		if try > 0 || !shapeChanged(err, shape, gen) {
			break
		}
	}
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
	return errors.As(err, &pgErr) && pgErr.Code == uniqueViolation && idIndex.MatchString(pgErr.ConstraintName)
}

// idIndex matches the names of the inbox's unique index on id: the
// primary key, and on a partitioned inbox each partition's own
// (migration 019).
var idIndex = regexp.MustCompile(`^(inbox_p[0-9]+_)?inbox_pkey$`)

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// uniqueViolation is SQLSTATE 23505.
const uniqueViolation = "23505"

// The arrays of the batch statements (InsertBatch, Complete) are sent as
// the types below rather than as plain slices: pgx reads a slice through
// pgtype.FlatArray, whose Index boxes each element in an interface, an
// allocation per element of every string and most integers (a fifth of
// the pool's allocations). These hand out a pointer-shaped reference to
// the element instead, which an interface holds without allocating, and
// which the codecs encode through their valuer interfaces (TextValuer,
// Int64Valuer, BytesValuer) to the same bytes. A nil array is NULL, as a
// nil slice is.

// oneDimension is the dimensions of a one-dimensional array of n elements
// (nil for a nil array: NULL).
func oneDimension(isNil bool, n int) []pgtype.ArrayDimension {
	if isNil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}

// textArray is a text[] argument.
type textArray []string

func (a textArray) Dimensions() []pgtype.ArrayDimension { return oneDimension(a == nil, len(a)) }
func (a textArray) Index(i int) any                     { return textRef{&a[i]} }
func (a textArray) IndexType() any                      { return textRef{} }

type textRef struct{ p *string }

func (r textRef) TextValue() (pgtype.Text, error) { return pgtype.Text{String: *r.p, Valid: true}, nil }

// bytesTextArray is a text[] argument made of bytes, as a []string of them
// would be, without copying them into strings. The bytes must not change
// while the statement is sent.
type bytesTextArray [][]byte

func (a bytesTextArray) Dimensions() []pgtype.ArrayDimension { return oneDimension(a == nil, len(a)) }
func (a bytesTextArray) Index(i int) any                     { return bytesTextRef{&a[i]} }
func (a bytesTextArray) IndexType() any                      { return bytesTextRef{} }

type bytesTextRef struct{ p *[]byte }

// TextValue is the bytes as text; nil bytes are the empty string, as
// string(nil) is.
func (r bytesTextRef) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: unsafe.String(unsafe.SliceData(*r.p), len(*r.p)), Valid: true}, nil
}

// byteaArray is a bytea[] argument; a nil element is NULL.
type byteaArray [][]byte

func (a byteaArray) Dimensions() []pgtype.ArrayDimension { return oneDimension(a == nil, len(a)) }
func (a byteaArray) Index(i int) any                     { return byteaRef{&a[i]} }
func (a byteaArray) IndexType() any                      { return byteaRef{} }

type byteaRef struct{ p *[]byte }

func (r byteaRef) BytesValue() ([]byte, error) { return *r.p, nil }

// int64Array is a bigint[] argument.
type int64Array []int64

func (a int64Array) Dimensions() []pgtype.ArrayDimension { return oneDimension(a == nil, len(a)) }
func (a int64Array) Index(i int) any                     { return int64Ref{&a[i]} }
func (a int64Array) IndexType() any                      { return int64Ref{} }

type int64Ref struct{ p *int64 }

func (r int64Ref) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: *r.p, Valid: true}, nil
}

// int32Array is an integer[] argument.
type int32Array []int32

func (a int32Array) Dimensions() []pgtype.ArrayDimension { return oneDimension(a == nil, len(a)) }
func (a int32Array) Index(i int) any                     { return int32Ref{&a[i]} }
func (a int32Array) IndexType() any                      { return int32Ref{} }

type int32Ref struct{ p *int32 }

func (r int32Ref) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*r.p), Valid: true}, nil
}
