-- Whether the current partition needs ANALYZE now: it has never been
-- analyzed and holds 1,000 changed rows, or half its rows changed since
-- the last analyze. A partition planned as nearly empty is read by
-- sequential scans in the plans cached meanwhile (every statement on the
-- inbox); autovacuum analyzes it only at its next naptime. Reads
-- pg_stat_user_tables only.
SELECT coalesce(bool_or(
           (s.last_analyze IS NULL AND s.last_autoanalyze IS NULL AND s.n_mod_since_analyze >= 1000)
        OR s.n_mod_since_analyze > greatest(c.reltuples, 1000) / 2), false)
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relid = to_regclass(@part)
