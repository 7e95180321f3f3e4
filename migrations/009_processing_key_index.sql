---- tern: disable-tx ----
-- 009: the index claims read to refuse an ordered key's head while any row
-- of its key is processing, whatever its id (a SQL producer's transaction
-- that commits after a later row of its key was claimed leaves a row with a
-- lower id behind a running one). It holds only the processing rows that
-- their claim marked runs_ordered (a row with a key, of an ordered route at
-- that claim), a few per handler, so the lookup costs one probe of a small
-- index however long a key's backlog is, and a claim of an unordered route
-- adds no entry to it (end to end, an entry per keyed claim cost about 9 %
-- of the rate). Keyed by the key's hash, as inbox_key_hash_idx (008) is, so
-- a long key never makes a row unstorable; the lookups match the hash, then
-- the key. Built CONCURRENTLY: claims, completions and ingest go on
-- meanwhile.
-- Expand only: binaries of schemas 1 to 8 keep working (they never set
-- runs_ordered: while such a binary runs beside this one, its processing
-- rows are not seen by this lookup, as before this schema).
-- inboxd:oldest-compatible-schema 1
ALTER TABLE inbox ADD COLUMN IF NOT EXISTS runs_ordered boolean;
CREATE INDEX CONCURRENTLY IF NOT EXISTS inbox_processing_key_idx
    ON inbox (source, hashtextextended(encode(key, 'hex'), 0), id)
    WHERE status = 'processing' AND runs_ordered;

---- create above / drop below ----
---- tern: disable-tx ----

DROP INDEX CONCURRENTLY IF EXISTS inbox_processing_key_idx;
ALTER TABLE inbox DROP COLUMN IF EXISTS runs_ordered;
