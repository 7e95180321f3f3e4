---- tern: disable-tx ----
-- 004: indexes for retention and for the staleness gauges, built
-- CONCURRENTLY so that claims, completions and ingest go on meanwhile (the
-- migration runs outside a transaction, one statement at a time, and each
-- statement is safe to run again if an earlier attempt stopped half-way).
-- Expand only: binaries of schemas 1 to 3 keep working.
-- inboxd:oldest-compatible-schema 1

-- Retention deletes processed rows oldest first by processed_at. Every
-- completion adds an entry at the right-hand end of this index (processed_at
-- grows with time), the cheapest kind of B-tree insert.
CREATE INDEX CONCURRENTLY IF NOT EXISTS inbox_processed_at_idx
    ON inbox (processed_at) WHERE status = 'processed';

-- The received index also carries received_at, so the gauges (oldest
-- received row, stale rows, rows waiting in backoff included) are read in
-- the same index-only scan as the count of received rows, with no index of
-- their own to maintain on every insert.
CREATE INDEX CONCURRENTLY IF NOT EXISTS inbox_received_v2_idx
    ON inbox (available_at, id) INCLUDE (received_at) WHERE status = 'received';
DROP INDEX CONCURRENTLY IF EXISTS inbox_received_idx;
ALTER INDEX inbox_received_v2_idx RENAME TO inbox_received_idx;

---- create above / drop below ----
---- tern: disable-tx ----

CREATE INDEX CONCURRENTLY IF NOT EXISTS inbox_received_v1_idx
    ON inbox (available_at, id) WHERE status = 'received';
DROP INDEX CONCURRENTLY IF EXISTS inbox_received_idx;
ALTER INDEX inbox_received_v1_idx RENAME TO inbox_received_idx;
DROP INDEX CONCURRENTLY IF EXISTS inbox_processed_at_idx;
