-- 010: which claimed rows have started their handler, recorded per claim
-- rather than per row. A handler that kills the process must cost its row
-- an attempt, so the database must know that the row started before its
-- handler runs; a row that was merely claimed with it must not pay. A
-- claim marks started (inbox.started) the rows it hands straight to idle
-- handlers; the others start later, and writing each one's start into its
-- row cost an update per event (end to end at about half the rate). Now
-- a worker records them in one small row per claim: inbox_starts.bits has
-- bit claim_pos - 1 set for each row of the claim (inbox.lease_token =
-- inbox_starts.token) that started (get_bit numbering: the least
-- significant bit of the first byte is bit 0); version orders a worker's
-- writes of it. The rescuer reads both (sql/rescue.sql). A worker deletes
-- its claims' rows once their rows are done; the rescuer deletes those of
-- workers that died.
-- Expand only: binaries of schemas 1 to 9 ignore both (they read
-- inbox.started alone, which this schema's binaries keep writing at claim
-- time, so a rescue by an older replica at worst refunds an attempt, as
-- before schema 2).
-- inboxd:oldest-compatible-schema 1
ALTER TABLE inbox ADD COLUMN IF NOT EXISTS claim_pos integer;

CREATE TABLE IF NOT EXISTS inbox_starts (
    token      bigint PRIMARY KEY,
    bits       bytea NOT NULL,
    version    bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

---- create above / drop below ----

DROP TABLE IF EXISTS inbox_starts;
ALTER TABLE inbox DROP COLUMN IF EXISTS claim_pos;
