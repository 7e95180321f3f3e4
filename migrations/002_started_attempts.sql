-- 002: a lease that expires before its handler starts costs no attempt, and
-- attempts are bounded.
-- Expand only: a binary built for schema 1 keeps working on it (it never
-- reads `started`, and never counts a million attempts).
-- inboxd:oldest-compatible-schema 1

-- started says whether the row's handler has started under the current
-- claim: the claim sets it for rows handed straight to an idle handler,
-- lease renewal for rows that waited in a worker's prefetch queue. The
-- rescuer refunds the attempt of a row whose lease expired before its
-- handler started. It means something only while the row is processing;
-- every statement that moves a row out of processing resets it.
ALTER TABLE inbox ADD COLUMN started boolean NOT NULL DEFAULT false;

-- attempts is bounded, so no statement that counts an attempt can overflow
-- (a row inserted with attempts = 2147483647 once made every claim fail).
-- The constraint is added NOT VALID, which takes the table's lock only
-- briefly, and validated by the next migration, which does not block writes.
UPDATE inbox SET attempts = 1000000 WHERE attempts > 1000000;
ALTER TABLE inbox ADD CONSTRAINT inbox_attempts_max CHECK (attempts <= 1000000) NOT VALID;

---- create above / drop below ----

ALTER TABLE inbox DROP CONSTRAINT inbox_attempts_max;
ALTER TABLE inbox DROP COLUMN started;
