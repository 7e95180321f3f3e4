-- The end of the next batch of {{.Status}} outbox rows past @after: the id
-- of the @limit-th such row after it in id order (or of the last one), NULL
-- when none is left. `inboxd outbox requeue` and `discard` (dead rows;
-- `discard --pending`, pending ones) work range by range,
-- (after, end], each range a short statement of its own, as the inbox's
-- (failed_range.sql): no statement grows with the backlog, and a filter
-- that matches few rows still reads no more than @limit index entries per
-- range. With @ids, only those rows count.
-- Index: outbox_dead_idx (id), partial on dead rows, or outbox_pending_idx
-- (id) on pending ones, at most @limit entries of it; with @ids, the
-- primary key. Locks nothing.
SELECT max(id)
FROM (SELECT id
      FROM outbox
      WHERE status = '{{.Status}}'
        AND id > @after::bigint
        AND (@ids::bigint[] IS NULL OR id = ANY (@ids::bigint[]))
      ORDER BY id
      LIMIT @limit::int) AS batch
