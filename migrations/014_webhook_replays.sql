-- 014: the replay window of webhook sources whose signature covers the
-- body alone (github, hmac-sha256: no timestamp, no signed id). A source
-- with replay_window records the SHA-256 of each body it accepts and the
-- event id it came under; within the window, the same body under another
-- event id is a replay, refused (answered 200, nothing stored). The table,
-- not a replica's memory, decides, so a replay sent to another replica is
-- refused as well. The webhook source of every replica deletes the rows
-- older than its sources' windows, in small batches.
--
-- Expand only: binaries of schemas 1 to 14 do not know the table.
-- inboxd:oldest-compatible-schema 1
CREATE TABLE IF NOT EXISTS webhook_replays (
    -- The webhook source's name (the rows' source).
    source      text NOT NULL,
    -- SHA-256 of the request's body.
    body_sha256 bytea NOT NULL,
    -- The event id the body was first accepted under in the window: a
    -- retry of that delivery (the same id) is no replay.
    event_id    text NOT NULL,
    -- When the body was accepted under event_id.
    seen_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, body_sha256)
);
-- Pruning, by source and age.
CREATE INDEX IF NOT EXISTS webhook_replays_seen_idx ON webhook_replays (source, seen_at);

---- create above / drop below ----

DROP TABLE IF EXISTS webhook_replays;
