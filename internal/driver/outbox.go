package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	outboxInsertSQL  = load("outbox_insert.sql")
	outboxBeatSQL    = load("outbox_beat.sql")
	outboxRenewSQL   = load("outbox_shards_renew.sql")
	outboxAcquireSQL = load("outbox_shards_acquire.sql")
	outboxReleaseSQL = load("outbox_shards_release.sql")
	outboxClaimSQL   = load("outbox_claim.sql")
	outboxOutcomeSQL = load("outbox_outcome.sql")
	outboxDeleteSQL  = load("outbox_retention.sql")
	outboxStatsSQL   = load("outbox_stats.sql")
)

// OutboxShards is the number of shards of the outbox table
// (migrations/011_outbox.sql): the units a relay holds a lease on.
const OutboxShards = 32

// The statuses of an outbox row.
const (
	OutboxPending   = "pending"
	OutboxPublished = "published"
	OutboxDead      = "dead"
)

// OutboxMessage is a row to write to the outbox.
type OutboxMessage struct {
	Destination string
	// EventID may be empty: the database makes a UUID.
	EventID   string
	EventType string
	// Key may be empty: no key (NULL).
	Key     string
	Headers map[string]string
	Payload []byte
}

// OutboxWritten is what InsertOutbox wrote of one message.
type OutboxWritten struct {
	ID      int64
	EventID string
}

// InsertOutbox writes msgs to the outbox through db (the caller's
// transaction), in their order (sql/outbox_insert.sql).
func InsertOutbox(ctx context.Context, db DB, msgs []OutboxMessage) ([]OutboxWritten, error) {
	n := len(msgs)
	dests, ids, types := make([]string, n), make([]string, n), make([]string, n)
	keys := make([]*string, n)
	headers := make([][]byte, n)
	payloads := make([][]byte, n)
	for i, m := range msgs {
		dests[i], ids[i], types[i] = m.Destination, m.EventID, m.EventType
		if m.Key != "" {
			keys[i] = &msgs[i].Key
		}
		h := m.Headers
		if h == nil {
			h = map[string]string{}
		}
		b, err := json.Marshal(h)
		if err != nil {
			return nil, fmt.Errorf("outbox headers: %w", err)
		}
		headers[i] = b
		payloads[i] = m.Payload
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
	}
	rows, err := db.Query(ctx, outboxInsertSQL, pgx.NamedArgs{
		"destinations": dests, "event_ids": ids, "event_types": types, "keys": keys,
		"headers": headers, "payloads": payloads,
	})
	if err != nil {
		return nil, fmt.Errorf("write to the outbox: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxWritten, error) {
		var w OutboxWritten
		return w, r.Scan(&w.ID, &w.EventID)
	})
	if err != nil {
		return nil, fmt.Errorf("write to the outbox: %w", err)
	}
	return out, nil
}

// OutboxBeat records relay as alive, forgets the relays not seen for gone,
// and returns how many relays were seen within alive, relay included
// (sql/outbox_beat.sql).
func OutboxBeat(ctx context.Context, db DB, relay string, alive, gone time.Duration) (int, error) {
	var n int
	err := db.QueryRow(ctx, outboxBeatSQL, pgx.NamedArgs{
		"relay": relay, "alive_ms": alive.Milliseconds(), "gone_ms": gone.Milliseconds(),
	}).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("outbox relay heartbeat: %w", err)
	}
	return n, nil
}

// ShardLease is a shard held under a token.
type ShardLease struct {
	Shard int16
	Token int64
}

func splitLeases(ls []ShardLease) ([]int16, []int64) {
	shards, tokens := make([]int16, len(ls)), make([]int64, len(ls))
	for i, l := range ls {
		shards[i], tokens[i] = l.Shard, l.Token
	}
	return shards, tokens
}

// RenewShards renews relay's leases held for lease from now and returns the
// shards renewed; the others expired (sql/outbox_shards_renew.sql).
func RenewShards(ctx context.Context, db DB, relay string, held []ShardLease, lease time.Duration) ([]int16, error) {
	shards, tokens := splitLeases(held)
	rows, err := db.Query(ctx, outboxRenewSQL, pgx.NamedArgs{
		"relay": relay, "shards": shards, "tokens": tokens, "lease_ms": lease.Milliseconds(),
	})
	if err != nil {
		return nil, fmt.Errorf("renew outbox shard leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int16])
	if err != nil {
		return nil, fmt.Errorf("renew outbox shard leases: %w", err)
	}
	return out, nil
}

// AcquireShards takes up to want free shards for relay, for lease, with
// new tokens (sql/outbox_shards_acquire.sql).
func AcquireShards(ctx context.Context, db DB, relay string, want int, lease time.Duration) ([]ShardLease, error) {
	rows, err := db.Query(ctx, outboxAcquireSQL, pgx.NamedArgs{
		"relay": relay, "want": want, "lease_ms": lease.Milliseconds(),
	})
	if err != nil {
		return nil, fmt.Errorf("take outbox shards: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ShardLease, error) {
		var l ShardLease
		return l, r.Scan(&l.Shard, &l.Token)
	})
	if err != nil {
		return nil, fmt.Errorf("take outbox shards: %w", err)
	}
	return out, nil
}

// ReleaseShards gives relay's leases back (sql/outbox_shards_release.sql).
func ReleaseShards(ctx context.Context, db DB, relay string, held []ShardLease) error {
	shards, tokens := splitLeases(held)
	if _, err := db.Exec(ctx, outboxReleaseSQL, pgx.NamedArgs{"relay": relay, "shards": shards, "tokens": tokens}); err != nil {
		return fmt.Errorf("release outbox shards: %w", err)
	}
	return nil
}

// OutboxRow is a pending row claimed for publication.
type OutboxRow struct {
	ID          int64
	Shard       int16
	Destination string
	EventID     string
	EventType   string
	Key         string // "" when NULL
	Headers     map[string]string
	Payload     []byte
	Attempts    int
	CreatedAt   time.Time
}

// OutboxClaim says which rows ClaimOutbox reads.
type OutboxClaim struct {
	// Shards are the shards to read.
	Shards []int16
	// Held are the destinations left alone.
	Held []string
	// Batch and Bytes bound the batch (the first row is read whatever its
	// size).
	Batch, Bytes int
}

// ClaimOutbox reads the next batch of pending rows (sql/outbox_claim.sql).
func ClaimOutbox(ctx context.Context, db DB, c OutboxClaim) ([]OutboxRow, error) {
	held := append([]string{}, c.Held...) // never nil: a NULL array matches nothing
	rows, err := db.Query(ctx, outboxClaimSQL, pgx.NamedArgs{
		"shards": c.Shards, "held": held, "batch": c.Batch, "batch_bytes": c.Bytes,
	})
	if err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxRow, error) {
		var o OutboxRow
		var key *string
		var hs map[string]json.RawMessage
		if err := r.Scan(&o.ID, &o.Shard, &o.Destination, &o.EventID, &o.EventType, &key, &hs,
			&o.Payload, &o.Attempts, &o.CreatedAt); err != nil {
			return o, err
		}
		if key != nil {
			o.Key = *key
		}
		o.Headers = headerStrings(hs)
		return o, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	return out, nil
}

// headerStrings turns the headers column into strings: a string as it is,
// any other JSON value (a plain SQL writer may store numbers) as its JSON
// text.
func headerStrings(hs map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(hs))
	for k, v := range hs {
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			out[k] = s
		} else {
			out[k] = string(v)
		}
	}
	return out
}

// OutboxOutcome is what a broker said of one row.
type OutboxOutcome struct {
	ID int64
	// Status is OutboxPublished, OutboxPending (refused, retried after
	// Delay) or OutboxDead.
	Status string
	// Error is the refusal's reason.
	Error string
	// Delay is how long a refused row waits.
	Delay time.Duration
}

// RecordOutbox writes outcomes, fenced by relay's leases held (the shards
// and tokens the rows were claimed under), and returns the ids written:
// the others' shards were no longer relay's (sql/outbox_outcome.sql).
func RecordOutbox(ctx context.Context, db DB, relay string, held []ShardLease, outcomes []OutboxOutcome) ([]int64, error) {
	shards, tokens := splitLeases(held)
	n := len(outcomes)
	ids, sts, errs, delays := make([]int64, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, o := range outcomes {
		ids[i], sts[i], errs[i], delays[i] = o.ID, o.Status, o.Error, o.Delay.Milliseconds()
	}
	rows, err := db.Query(ctx, outboxOutcomeSQL, pgx.NamedArgs{
		"relay": relay, "shards": shards, "tokens": tokens,
		"ids": ids, "outcomes": sts, "errors": errs, "delays_ms": delays,
	})
	if err != nil {
		return nil, fmt.Errorf("write the outbox's outcomes: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("write the outbox's outcomes: %w", err)
	}
	return out, nil
}

// DeletePublished deletes one batch of at most batch rows published more
// than olderThan ago and reports how many it deleted
// (sql/outbox_retention.sql).
func DeletePublished(ctx context.Context, db DB, olderThan time.Duration, batch int) (int64, error) {
	tag, err := db.Exec(ctx, outboxDeleteSQL, pgx.NamedArgs{"retention_ms": olderThan.Milliseconds(), "batch": batch})
	if err != nil {
		return 0, fmt.Errorf("delete published outbox rows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// OutboxStats are the outbox's gauges.
type OutboxStats struct {
	Pending int64
	// OldestPending is the age of the oldest pending row; 0 when none.
	OldestPending time.Duration
	Dead          int64
}

// ReadOutboxStats reads the outbox's gauges (sql/outbox_stats.sql).
func ReadOutboxStats(ctx context.Context, db DB) (OutboxStats, error) {
	var s OutboxStats
	var oldest float64
	if err := db.QueryRow(ctx, outboxStatsSQL).Scan(&s.Pending, &oldest, &s.Dead); err != nil {
		return OutboxStats{}, fmt.Errorf("read the outbox's stats: %w", err)
	}
	s.OldestPending = time.Duration(oldest * float64(time.Second))
	return s, nil
}
