-- insert_batch writes one ingest batch in one statement (one transaction):
-- one array per column, one element per message, in fetch order. A row whose
-- (source, event_id) is already in the inbox is skipped; the command tag's
-- row count is the number of rows actually inserted. kafka_topic is the
-- source. Empty last_error strings are stored as NULL.
-- Index: the unique (source, event_id) index decides the conflicts; the
-- primary key draws from the identity sequence (see driver.IdentityClash).
INSERT INTO inbox (source, event_id, event_type, key, payload, headers, status,
                   last_error, kafka_topic, kafka_partition, kafka_offset)
SELECT b.source, b.event_id, b.event_type, b.key, b.payload, b.headers::jsonb, b.status,
       NULLIF(b.last_error, ''), b.source, b.kafka_partition, b.kafka_offset
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bytea[], $6::text[],
            $7::text[], $8::text[], $9::int4[], $10::int8[])
     AS b(source, event_id, event_type, key, payload, headers, status,
          last_error, kafka_partition, kafka_offset)
ON CONFLICT (source, event_id) DO NOTHING
