-- 003: validate the attempts bound added by 002. VALIDATE CONSTRAINT scans
-- the table under a SHARE UPDATE EXCLUSIVE lock: claims, completions and
-- ingest inserts go on meanwhile.
-- inboxd:oldest-compatible-schema 1

-- Rows written over the limit between 002 and now (by a third party) are
-- clamped first, so validation cannot fail on them.
UPDATE inbox SET attempts = 1000000 WHERE attempts > 1000000;
ALTER TABLE inbox VALIDATE CONSTRAINT inbox_attempts_max;

---- create above / drop below ----

-- Nothing to undo: 002's down migration drops the constraint.
