-- Give shards back (a relay above its share, or stopping) so that another
-- relay takes them at once instead of after the lease. Only under the
-- token the relay holds them with.
UPDATE outbox_shards AS s
SET owner = NULL, expires_at = '-infinity'
FROM unnest(@shards::smallint[], @tokens::bigint[]) AS h(shard, token)
WHERE s.shard = h.shard AND s.token = h.token AND s.owner = @relay
