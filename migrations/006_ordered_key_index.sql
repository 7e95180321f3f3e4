---- tern: disable-tx ----
-- 006: the index ordered routes read: for a row with a key, its nearest
-- earlier unfinished row of the same (source, key) (claims), and the next
-- one (completions, which unpark it). It holds only rows with a key in the
-- live statuses, so it stays small however many processed rows are kept.
-- Built CONCURRENTLY: claims, completions and ingest go on meanwhile.
-- Expand only: binaries of schemas 1 to 5 keep working.
-- inboxd:oldest-compatible-schema 1
CREATE INDEX CONCURRENTLY IF NOT EXISTS inbox_key_idx
    ON inbox (source, key, id)
    WHERE key IS NOT NULL AND status IN ('received', 'processing', 'dead');

---- create above / drop below ----
---- tern: disable-tx ----

DROP INDEX CONCURRENTLY IF EXISTS inbox_key_idx;
