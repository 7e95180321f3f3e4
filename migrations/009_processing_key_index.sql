---- tern: disable-tx ----
-- 009: the index claims read to refuse an ordered key's head while any row
-- of its key is processing, whatever its id (a SQL producer's transaction
-- that commits after a later row of its key was claimed leaves a row with a
-- lower id behind a running one). It holds only the processing rows with a
-- key, a few per handler, so the lookup costs one probe of a small index
-- however long a key's backlog is. Built CONCURRENTLY: claims, completions
-- and ingest go on meanwhile.
-- Keyed by the key's hash, as inbox_key_hash_idx (008) is, so a long key
-- never makes a row unstorable; the lookups match the hash, then the key.
-- Expand only: binaries of schemas 1 to 8 keep working.
-- inboxd:oldest-compatible-schema 1
CREATE INDEX CONCURRENTLY IF NOT EXISTS inbox_processing_key_idx
    ON inbox (source, hashtextextended(encode(key, 'hex'), 0), id)
    WHERE key IS NOT NULL AND status = 'processing';

---- create above / drop below ----
---- tern: disable-tx ----

DROP INDEX CONCURRENTLY IF EXISTS inbox_processing_key_idx;
