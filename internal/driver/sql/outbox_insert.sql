-- Write messages to the outbox in the caller's transaction (inboxd.Emit),
-- in the order given: ids, and so the order of a key's messages, follow
-- it. An empty event id takes a UUID made by the database, as the column's
-- default does for plain SQL writers. Returns each row's id and event id,
-- in the same order.
INSERT INTO outbox (destination, event_id, event_type, key, headers, payload)
SELECT m.destination, coalesce(nullif(m.event_id, ''), gen_random_uuid()::text), m.event_type, m.key, m.headers, m.payload
FROM unnest(@destinations::text[], @event_ids::text[], @event_types::text[], @keys::text[],
            @headers::jsonb[], @payloads::bytea[])
     WITH ORDINALITY AS m(destination, event_id, event_type, key, headers, payload, n)
ORDER BY m.n
RETURNING id, event_id
