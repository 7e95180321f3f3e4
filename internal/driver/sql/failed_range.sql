-- The end of the next batch of dead or rejected rows past @after: the id of
-- the @limit-th row of @status after it in id order (or of the last one),
-- NULL when none is left. requeue and discard work range by range,
-- (after, end], each range a short statement or transaction of its own, so
-- that no statement grows with the backlog, and a filter that matches few
-- rows still reads no more than @limit index entries per range. With @ids,
-- only those rows count.
-- Index: inbox_failed_idx (status, id), partial on dead and rejected rows,
-- at most @limit entries of it. Locks nothing.
SELECT max(id)
FROM (SELECT id
      FROM inbox
      WHERE status = @status::text AND status IN ('dead', 'rejected')
        AND id > @after::bigint
        AND (@ids::bigint[] IS NULL OR id = ANY (@ids::bigint[]))
      ORDER BY status, id
      LIMIT @limit::int) AS batch
