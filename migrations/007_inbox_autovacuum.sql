-- 007: vacuum the inbox often. Every event leaves two or three dead row
-- versions behind (the claim's update, the outcome's, retention's delete),
-- and none of those updates is HOT (each changes status, on which the
-- partial indexes depend). With PostgreSQL's default thresholds (20 % of
-- the table) a large inbox waited for millions of dead versions between
-- two vacuums while claims walked their entries in the received index.
-- Here autovacuum takes the inbox after 1 % of it (at least 10,000 rows)
-- has changed, and analyzes it after 2 %. Only storage parameters: every
-- binary works on either side of it; RESET gives the defaults back.
-- inboxd:oldest-compatible-schema 1
ALTER TABLE inbox SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02
);

---- create above / drop below ----

ALTER TABLE inbox RESET (
    autovacuum_vacuum_scale_factor,
    autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor,
    autovacuum_analyze_scale_factor
);
