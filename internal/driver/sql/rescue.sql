-- Return rows whose lease expired (their worker died, hung or lost the
-- database) to received. Safe on every replica at once (SKIP LOCKED).
--
-- A row whose handler had started keeps the attempt the claim counted, and
-- goes dead when its attempts are used up: @max_attempts, or its route's
-- own (@max_types, @max_values). A row whose
-- lease expired while it waited in a worker's prefetch queue never ran: its
-- attempt is refunded, and it keeps the last_error of its previous attempt.
-- Every row returned to received is due now; in the same transaction, the
-- caller then delays those whose attempt had started by their route's
-- backoff (sql/rescue_delay.sql).
-- last_error of a started row begins with @expired_prefix (see suspects.sql).
-- Started: its claim said so (inbox.started), or its worker recorded the
-- start in its claim's bits (inbox_starts, migration 010: bit claim_pos - 1
-- of the claim's row, read through its primary key).
-- Reads the partial index on processing rows; locks the expired rows
-- (SKIP LOCKED: never waits).
WITH expired AS (
    SELECT inbox.id,
           inbox.started OR coalesce(
               (SELECT get_bit(s.bits, inbox.claim_pos - 1) = 1
                FROM inbox_starts AS s
                WHERE s.token = inbox.lease_token
                  AND inbox.claim_pos BETWEEN 1 AND 8 * length(s.bits)), false) AS started
    FROM inbox
    WHERE status = 'processing' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT @limit
    FOR UPDATE OF inbox SKIP LOCKED
)
UPDATE inbox AS i
SET status           = CASE WHEN expired.started AND i.attempts >= coalesce(
                                (SELECT m.max FROM unnest(@max_types::text[], @max_values::int[]) AS m(type, max)
                                 WHERE m.type = i.event_type), @max_attempts)
                            THEN 'dead' ELSE 'received' END,
    attempts         = CASE WHEN expired.started THEN i.attempts
                            ELSE greatest(i.attempts - 1, 0) END,
    available_at     = now(),
    last_error       = CASE WHEN expired.started
                            THEN @expired_prefix::text || i.attempts
                                 || ' (worker ' || coalesce(i.locked_by, 'unknown') || ' lost the row)'
                            ELSE i.last_error END,
    started          = false,
    lease_token      = NULL,
    lease_expires_at = NULL,
    locked_by        = NULL,
    updated_at       = now()
FROM expired
WHERE i.id = expired.id
RETURNING i.id, i.event_id, i.event_type, i.status, i.attempts, expired.started
