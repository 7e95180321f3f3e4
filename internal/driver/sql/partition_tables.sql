-- The partitioned tables (migration 019, inboxd_partitioned): each one's
-- generation span, when its generation last changed, whether it is being
-- reverted, and its current generation (the sequence the rows' default
-- reads). No row: neither table is partitioned.
SELECT p.tbl, extract(epoch FROM p.span)::float8, p.switched_at, p.reverting,
       pg_sequence_last_value((p.tbl || '_gen_seq')::regclass), now()
FROM inboxd_partitioned p
ORDER BY p.tbl
