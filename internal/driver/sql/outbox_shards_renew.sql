-- Renew the shard leases a relay holds, each under the token it got it
-- with. A lease that already expired is not renewed, even if no one took
-- it: the relay may have stopped publishing it, and takes it again (with a
-- new token) only through outbox_shards_acquire.sql. Returns the shards
-- renewed; the relay drops the others.
UPDATE outbox_shards AS s
SET expires_at = now() + @lease_ms::bigint * interval '1 millisecond'
FROM unnest(@shards::smallint[], @tokens::bigint[]) AS h(shard, token)
WHERE s.shard = h.shard AND s.token = h.token
  AND s.owner = @relay AND s.expires_at > now()
RETURNING s.shard
