-- Mark one row processed at the end of a transactional handler's
-- transaction, fenced by its lease token; zero rows affected means the
-- lease was lost and the transaction must roll back.
-- It runs after the handler, not before: the row is then locked only from
-- here to the commit, never for the handler's whole run, so lease renewal
-- and the rescuer are never held up by a slow handler. A concurrent claim
-- by another worker is impossible while our token is on the row; a rescue
-- changes the token, and this update then finds nothing to mark.
-- Fenced by the lease token alone, as in complete.sql (see there why). On
-- an ordered route the next row of the key is unparked
-- (sql/unpark_successors.sql, as in complete.sql); the statement returns
-- the marked row's id, or nothing when fenced.
{{if .Ordered}}WITH done AS (
{{end -}}
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
RETURNING id{{if .Ordered}}, source, key, event_type, status, @chained::boolean AS chained
), {{template "unpark_successors"}}
SELECT id FROM done{{end}}
