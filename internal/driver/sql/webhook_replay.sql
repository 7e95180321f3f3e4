-- Record that the webhook source @source accepts the body whose SHA-256 is
-- @body_sha256 under @event_id, unless that body was accepted under another
-- event id less than @window_ms ago (a replay). A row comes back when the
-- request is no replay: the body is new, its last acceptance is older than
-- the window, or it came under the same event id (a retry of the same
-- delivery, which the inbox's unique key deduplicates).
--
-- The statement's transaction commits with synchronous_commit off (set
-- locally by the first CTE, which the INSERT reads so that it runs first):
-- it does not wait for its WAL to reach the disk, which would cost a
-- flush per request. Nothing that matters can be lost: the request's row
-- is inserted after this commit, so the row's own (synchronous) commit
-- flushes this record's WAL with it; a crash can lose only the record of
-- a request whose row was not committed, which was not answered 200 and
-- whose sender retries.
--
-- Index: the primary key (source, body_sha256). Locks: the one
-- webhook_replays row (a concurrent request with the same body waits for
-- this one's commit, then sees it).
WITH async AS (
    SELECT set_config('synchronous_commit', 'off', true)
)
INSERT INTO webhook_replays AS r (source, body_sha256, event_id, seen_at)
SELECT @source, @body_sha256, @event_id, now()
FROM async
ON CONFLICT (source, body_sha256) DO UPDATE
SET event_id = excluded.event_id,
    seen_at = CASE WHEN r.event_id = excluded.event_id THEN r.seen_at ELSE excluded.seen_at END
WHERE r.event_id = excluded.event_id
   OR r.seen_at < excluded.seen_at - @window_ms::bigint * interval '1 millisecond'
RETURNING true
