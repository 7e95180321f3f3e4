-- Unpark the next row of each key whose row was deleted by hand
-- (`inboxd discard` of a dead head on an ordered route): the deletion ends the
-- row as a completion would, and the row behind it must not wait for the
-- sweeper (sql/unpark.sql). Run it in the transaction that deleted the rows,
-- after the delete: @ids, @sources, @keys and @event_types are the deleted
-- rows. The rule is the completions' (sql/unpark_successors.sql, through
-- sql/holds_key.sql), with each deleted row taken as processed.
--
-- @ordered_types and @blocking_types are the deleted rows' own types (the
-- command that deletes does not know the daemon's routes): the successor is
-- the next row of the key of the same types that is unfinished, or dead. An
-- unpark too many is harmless (a claim parks the row again while its key is
-- held, see claim.sql); one too few waits for the sweeper.
-- Index: inbox_key_hash_idx for each successor; the primary key for the update,
-- which locks the successor (and leaves one that is not parked as it is).
-- Returns the successors' ids.
WITH done AS (
    SELECT d.id, d.source, d.key, d.event_type, 'processed'::text AS status, false AS chained
    FROM unnest(@ids::bigint[], @sources::text[], @keys::bytea[], @event_types::text[])
         AS d (id, source, key, event_type)
), {{template "unpark_successors"}}
SELECT id FROM unparked
