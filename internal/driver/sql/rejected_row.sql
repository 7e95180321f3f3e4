-- One rejected row as ingest stored it, for re-mapping with the current
-- configuration: the message's key, payload and headers and its Kafka
-- position. No row when it is no longer rejected.
-- Index: the primary key.
SELECT source, event_id, key, payload, headers::text, kafka_topic, kafka_partition, kafka_offset,
       coalesce(last_error, '')
FROM inbox
WHERE id = @id AND status = 'rejected'
