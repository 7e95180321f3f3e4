-- Unpark parked rows that no longer wait for anything: the row before them
-- in their key finished without unparking them (it was deleted by hand or by
-- `inboxd discard`, requeued and processed, or finished in the very moment
-- a claim parked them), or their route is no longer ordered. A safety net
-- run by the sweeper: completions unpark successors themselves.
-- It reads the parked rows only (the received index's '9999-12-31 00:00:00+00' end).
WITH stuck AS (
    SELECT p.id
    FROM inbox AS p
    WHERE p.status = 'received'
      AND p.available_at = '9999-12-31 00:00:00+00'
      AND (p.key IS NULL
           OR NOT p.event_type = ANY (@ordered_types::text[])
           OR NOT EXISTS (
               SELECT 1
               FROM inbox AS e
               WHERE e.source = p.source
                 AND {{template "key_hash" "e"}} = {{template "key_hash" "p"}}
                 AND e.key = p.key AND e.id < p.id
                 AND {{template "holds_key" "e"}}))
    ORDER BY p.id
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
)
UPDATE inbox AS i
SET available_at = now(), updated_at = now()
FROM stuck
WHERE i.id = stuck.id
RETURNING i.id
