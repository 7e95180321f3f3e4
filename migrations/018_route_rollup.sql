-- 018: the per-route rollup (internal/maintenance, rollup.go): per route
-- and per minute (span 60) and per hour (span 3600), the rows processed,
-- the attempts that failed and will be retried, the rows that died, and a
-- histogram of the processed rows' latency from received to processed
-- (latency_buckets: counts per bucket, maintenance.LatencyBounds). Every
-- replica's workers count their outcomes in memory and its maintenance
-- adds them here every few seconds (an upsert per route and span), so the
-- console's charts and `inboxd` read small rows, never the inbox. route is
-- the route's event type ('other' for types without a route of their
-- own, as the metrics' label). Minutes are kept two days, hours eight.
--
-- Expand only: binaries of schemas 1 to 17 do not know the table.
-- inboxd:oldest-compatible-schema 1
CREATE TABLE IF NOT EXISTS route_rollup (
    span            integer     NOT NULL,
    at              timestamptz NOT NULL,
    route           text        NOT NULL,
    processed       bigint      NOT NULL DEFAULT 0,
    retried         bigint      NOT NULL DEFAULT 0,
    dead            bigint      NOT NULL DEFAULT 0,
    latency_buckets bigint[]    NOT NULL,
    PRIMARY KEY (span, at, route),
    CONSTRAINT route_rollup_span_check CHECK (span IN (60, 3600))
);

---- create above / drop below ----

DROP TABLE IF EXISTS route_rollup;
