-- Whether the search by error text has its index (migration 21:
-- inbox_error_trgm_idx, pg_trgm on lower(last_error)): there and valid (a
-- build CONCURRENTLY that stopped half-way leaves it invalid; a
-- partitioned inbox's is valid once every partition's is attached).
SELECT coalesce((SELECT x.indisvalid FROM pg_index AS x
                 WHERE x.indexrelid = to_regclass('inbox_error_trgm_idx')
                   AND x.indrelid = to_regclass('inbox')), false)
