-- 020: an admin's controls of a route's rate limit and circuit breaker,
-- beside its pause (012), shared by every replica through the route
-- controls' reader (internal/maintenance, controls.go):
--   - rate and burst override the routes file's rate limit on every
--     replica until cleared (rate NULL: the file's rate, if any; burst
--     NULL: one second's worth of the rate);
--   - breaker_reset_at closes the route's breaker once, on every replica
--     whose breaker is open or half-open when it reads a newer reset than
--     it saw last (a breaker opens again on its next failures).
-- Who set each, and when, is kept beside it; the audit trail (016) keeps
-- every change.
--
-- Expand only: binaries of schemas 12 to 19 read route_controls' paused
-- rows and write their pauses as before; they ignore these columns.
-- inboxd:oldest-compatible-schema 1
ALTER TABLE route_controls
    ADD COLUMN IF NOT EXISTS rate             double precision,
    ADD COLUMN IF NOT EXISTS burst            integer,
    ADD COLUMN IF NOT EXISTS rate_by          text,
    ADD COLUMN IF NOT EXISTS rate_at          timestamptz,
    ADD COLUMN IF NOT EXISTS breaker_reset_by text,
    ADD COLUMN IF NOT EXISTS breaker_reset_at timestamptz;

ALTER TABLE route_controls DROP CONSTRAINT IF EXISTS route_controls_rate_check;
ALTER TABLE route_controls ADD CONSTRAINT route_controls_rate_check
    CHECK ((rate IS NULL OR rate > 0) AND (burst IS NULL OR (rate IS NOT NULL AND burst > 0)));

---- create above / drop below ----

ALTER TABLE route_controls DROP CONSTRAINT IF EXISTS route_controls_rate_check;
ALTER TABLE route_controls
    DROP COLUMN IF EXISTS rate,
    DROP COLUMN IF EXISTS burst,
    DROP COLUMN IF EXISTS rate_by,
    DROP COLUMN IF EXISTS rate_at,
    DROP COLUMN IF EXISTS breaker_reset_by,
    DROP COLUMN IF EXISTS breaker_reset_at;
