-- Delete the rollup's cells past their keeping: minutes older than
-- @minutes_for, hours older than @hours_for.
-- Index: the primary key (span, at, route), a range of each span.
DELETE FROM route_rollup
WHERE (span = 60 AND at < now() - @minutes_for::float8 * interval '1 second')
   OR (span = 3600 AND at < now() - @hours_for::float8 * interval '1 second')
