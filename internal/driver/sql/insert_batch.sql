-- insert_batch writes one ingest batch in one statement (one transaction):
-- one array per column, one element per message, in fetch order. A row whose
-- (source, event_id) is already in the inbox is skipped; the command tag's
-- row count is the number of rows actually inserted. A Kafka message's row
-- (b.kafka) keeps its position: kafka_topic is the source, with its
-- partition and offset; other sources' rows leave the three NULL. Empty
-- last_error strings are stored as NULL.
-- Index: the unique (source, event_id) index decides the conflicts; the
-- primary key draws from the identity sequence (see driver.IdentityClash).
INSERT INTO inbox (source, event_id, event_type, key, payload, headers, status,
                   last_error, kafka_topic, kafka_partition, kafka_offset)
SELECT b.source, b.event_id, b.event_type, b.key, b.payload, b.headers::jsonb, b.status,
       NULLIF(b.last_error, ''),
       CASE WHEN b.kafka THEN b.source END,
       CASE WHEN b.kafka THEN b.kafka_partition END,
       CASE WHEN b.kafka THEN b.kafka_offset END
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bytea[], $6::text[],
            $7::text[], $8::text[], $9::int4[], $10::int8[], $11::bool[])
     AS b(source, event_id, event_type, key, payload, headers, status,
          last_error, kafka_partition, kafka_offset, kafka)
ON CONFLICT (source, event_id) DO NOTHING
