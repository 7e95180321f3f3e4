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
-- History: each started attempt it ends is written to its row's history
-- (migration 017, sql/attempts_record.sql) in the same statement, with
-- outcome 'lease expired' (whether the row goes back to received or
-- dead), the worker that held it, its claim's time as its start (the
-- database knows none closer: updated_at, which renewals leave alone) and
-- its lease's end as its end; an unstarted attempt, refunded, is not an
-- attempt and is not written.
-- Reads the partial index on processing rows; locks the expired rows
-- (SKIP LOCKED: never waits).
WITH expired AS (
    SELECT inbox.id,
           inbox.started OR coalesce(
               (SELECT get_bit(s.bits, inbox.claim_pos - 1) = 1
                FROM inbox_starts AS s
                WHERE s.token = inbox.lease_token
                  AND inbox.claim_pos BETWEEN 1 AND 8 * length(s.bits)), false) AS started,
           inbox.attempts, inbox.locked_by, inbox.updated_at, inbox.lease_expires_at
    FROM inbox
    WHERE status = 'processing' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT @limit
    FOR UPDATE OF inbox SKIP LOCKED
), rescued AS (
UPDATE inbox AS i
SET status           = CASE WHEN expired.started AND i.attempts >= coalesce(
                                (SELECT m.max FROM unnest(@max_types::text[], @max_values::int[]) AS m(type, max)
                                 WHERE m.type = i.event_type), @max_attempts)
                            THEN 'dead' ELSE 'received' END,
    attempts         = CASE WHEN expired.started THEN i.attempts
                            ELSE greatest(i.attempts - 1, 0) END,
    available_at     = now(),
    last_error       = CASE WHEN expired.started
                            THEN {{template "lost_reason" "i."}}
                            ELSE i.last_error END,
    started          = false,
    lease_token      = NULL,
    lease_expires_at = NULL,
    locked_by        = NULL,
    updated_at       = now()
FROM expired
WHERE i.id = expired.id
RETURNING i.id, i.event_id, i.event_type, i.status, i.attempts, expired.started
), lost AS (
    SELECT e.id AS row_id, e.attempts AS attempt, e.updated_at AS started_at,
           e.lease_expires_at AS finished_at, coalesce(e.locked_by, '') AS worker,
           'lease expired'::text AS outcome, {{template "lost_reason" "e."}} AS error
    FROM expired AS e
    JOIN rescued AS r ON r.id = e.id
    WHERE e.started AND e.attempts > 0
), {{template "record_attempts" "lost"}}
SELECT id, event_id, event_type, status, attempts, started FROM rescued
