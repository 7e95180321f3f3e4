---- tern: disable-tx ----
-- 008: the ordered routes' key index holds a hash of the key, not the key.
-- inbox_key_idx (006) held every live row's key in full in a B-tree, whose
-- entries cannot exceed 2,704 bytes: a row with a longer (incompressible)
-- key could not be stored (SQLSTATE 54000) nor requeued, whatever its
-- route. inbox_key_hash_idx is on (source, the key's 64-bit hash, id) with
-- the same predicate; the ordered lookups match the hash and then the key
-- itself, so a collision costs a comparison, never a wrong order. The hash
-- is hashtextextended of the key's hex text (immutable; bytea has no
-- hash function callable from SQL).
-- Built CONCURRENTLY, then the old index dropped CONCURRENTLY: claims,
-- completions and ingest go on meanwhile, and each statement is safe to
-- run again if an earlier attempt stopped half-way.
-- Binaries of schemas 1 to 7 keep working on it: their statements are
-- unchanged and still correct (a schema-7 binary's ordered routes' tests
-- pass on it, all but the hot key one below), but their ordered-key lookups name the key, not its
-- hash, so they no longer have an index of their own and read the
-- source's live keyed rows instead: slow with a large backlog on one key
-- (with 20,000 rows parked behind one key, a schema-7 binary did not get
-- the other keys' 100 rows done in 45 s). For a rollback that lasts, build
-- the old index back by hand first (it fails while a live row has an
-- incompressible key over 2,704 bytes, which only this schema stores):
--   CREATE INDEX CONCURRENTLY inbox_key_idx ON inbox (source, key, id)
--     WHERE key IS NOT NULL AND status IN ('received', 'processing', 'dead')
-- inboxd:oldest-compatible-schema 1
CREATE INDEX CONCURRENTLY IF NOT EXISTS inbox_key_hash_idx
    ON inbox (source, hashtextextended(encode(key, 'hex'), 0), id)
    WHERE key IS NOT NULL AND status IN ('received', 'processing', 'dead');
DROP INDEX CONCURRENTLY IF EXISTS inbox_key_idx;

---- create above / drop below ----
---- tern: disable-tx ----

CREATE INDEX CONCURRENTLY IF NOT EXISTS inbox_key_idx
    ON inbox (source, key, id)
    WHERE key IS NOT NULL AND status IN ('received', 'processing', 'dead');
DROP INDEX CONCURRENTLY IF EXISTS inbox_key_hash_idx;
