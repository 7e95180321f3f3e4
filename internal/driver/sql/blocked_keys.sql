-- Keys of ordered routes held back by a dead row (on_dead: block), through
-- the partial index on dead and rejected rows: each distinct (source, key)
-- of a dead row of a blocking route counts once.
SELECT count(*)
FROM (SELECT DISTINCT source, key
      FROM inbox
      WHERE status = 'dead'
        AND key IS NOT NULL
        AND event_type = ANY (@blocking_types::text[])) AS blocked
