-- Record which claimed rows start their handler (start.go): for each claim
-- (@tokens) the worker writes its start bits as it holds them (@bits: bit
-- claim_pos - 1 set for each row of the claim that started, get_bit
-- numbering), with @versions increasing per claim, so that of two writes of
-- one claim racing (two mark writers) the later version stays. One small
-- row per claim, however many rows start: never a write per row. A row
-- whose claim marked it started (inbox.started) and that does not run
-- (@unmark_ids with their @unmark_tokens: a finished chain head, or the
-- rows beside a suspect; rare) is unmarked in its own row, fenced by its
-- token; a row locked by another statement (its own completion, typically)
-- is skipped: its outcome is being written. @done_tokens are claims whose
-- rows are all done: their starts row goes.
-- Index: inbox_starts' primary key; inbox's for the unmarked rows, locked in
-- id order (see complete.sql).
WITH upserted AS (
    INSERT INTO inbox_starts AS s (token, bits, version, updated_at)
    SELECT t.token, t.bits, t.version, now()
    FROM unnest(@tokens::bigint[], @bits::bytea[], @versions::bigint[]) AS t(token, bits, version)
    ON CONFLICT (token) DO UPDATE
        SET bits = EXCLUDED.bits, version = EXCLUDED.version, updated_at = now()
        WHERE s.version < EXCLUDED.version
    RETURNING s.token
), locked AS (
    SELECT i.id
    FROM inbox AS i
    JOIN unnest(@unmark_ids::bigint[], @unmark_tokens::bigint[]) AS u(id, token)
      ON i.id = u.id AND i.lease_token = u.token
    WHERE i.started
    ORDER BY i.id
    FOR UPDATE OF i SKIP LOCKED
), unmarked AS (
    UPDATE inbox AS i
    SET started = false
    FROM locked
    WHERE i.id = locked.id
    RETURNING i.id
), deleted AS (
    DELETE FROM inbox_starts
    WHERE token = ANY (@done_tokens::bigint[])
    RETURNING token
)
SELECT (SELECT count(*) FROM upserted) + (SELECT count(*) FROM unmarked) + (SELECT count(*) FROM deleted)
