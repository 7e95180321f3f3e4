-- Mark one row processed at the end of a transactional handler's
-- transaction, fenced by its lease token; zero rows affected means the
-- lease was lost and the transaction must roll back.
-- It runs after the handler, not before: the row is then locked only from
-- here to the commit, never for the handler's whole run, so lease renewal
-- and the rescuer are never held up by a slow handler. A concurrent claim
-- by another worker is impossible while our token is on the row; a rescue
-- changes the token, and this update then finds nothing to mark.
-- Fenced by the lease token alone, as in complete.sql (see there why). On
-- an ordered route the next row of the key is unparked, as in complete.sql;
-- the statement returns the marked row's id, or nothing when fenced.
WITH done AS (
    UPDATE inbox
    SET status           = 'processed',
        processed_at     = now(),
        started          = false,
        lease_token      = NULL,
        lease_expires_at = NULL,
        locked_by        = NULL,
        updated_at       = now()
    WHERE id = @id
      AND lease_token = @token
    RETURNING id, source, key, event_type
), successors AS (
    SELECT (SELECT n.id
            FROM inbox AS n
            WHERE n.source = d.source AND n.key = d.key AND n.id > d.id
              AND n.key IS NOT NULL
              AND n.status IN ('received', 'processing', 'dead')
              AND n.event_type = ANY (@ordered_types::text[])
              AND (n.status <> 'dead' OR n.event_type = ANY (@blocking_types::text[]))
            ORDER BY n.id
            LIMIT 1) AS id
    FROM done AS d
    WHERE d.key IS NOT NULL AND d.event_type = ANY (@ordered_types::text[])
), unparked AS (
    UPDATE inbox AS u
    SET available_at = CASE WHEN u.available_at = '9999-12-31 00:00:00+00' THEN now() ELSE u.available_at END
    FROM successors AS s
    WHERE u.id = s.id AND u.status = 'received'
    RETURNING u.id
)
SELECT id FROM done
