-- Extend the leases of rows still being handled. A row missing from the
-- result has been fenced: its handler must stop.
-- Fenced by the lease token alone, as in complete.sql (see there why).
UPDATE inbox AS i
SET lease_expires_at = now() + $3::bigint * interval '1 millisecond'
FROM unnest($1::bigint[], $2::bigint[]) AS c(id, lease_token)
WHERE i.id = c.id
  AND i.lease_token = c.lease_token
RETURNING i.id
