-- 012: route controls an operator sets at run time, shared by every
-- replica: a paused route's rows are not claimed (rows in flight finish);
-- a rate-limited route's claims take tokens from one bucket for the whole
-- fleet. route is the route's event type, '*' for the default route.
-- Expand only: binaries of schemas 1 to 11 do not read these tables (a
-- paused route is claimed by them as before).
-- inboxd:oldest-compatible-schema 1
CREATE TABLE IF NOT EXISTS route_controls (
    route     text PRIMARY KEY,
    paused    boolean NOT NULL DEFAULT false,
    -- Who paused it, and why (an operator's name or "console: <user>").
    paused_by text,
    reason    text,
    paused_at timestamptz,
    CONSTRAINT route_controls_route_check CHECK (route <> '')
);

-- One token bucket per rate-limited route (rate and burst come from each
-- replica's routes file): tokens is what is left at refilled_at.
CREATE TABLE IF NOT EXISTS route_tokens (
    route       text PRIMARY KEY,
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL DEFAULT now()
);

---- create above / drop below ----

DROP TABLE IF EXISTS route_tokens;
DROP TABLE IF EXISTS route_controls;
