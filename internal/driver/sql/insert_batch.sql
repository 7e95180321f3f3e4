-- insert_batch writes one ingest batch in one statement (one transaction):
-- one array per column, one element per message, in fetch order. A row whose
-- (source, event_id) is already in the inbox is skipped; the command tag's
-- row count is the number of rows actually inserted. A Kafka message's row
-- (b.kafka) keeps its position: kafka_topic is the source, with its
-- partition and offset; other sources' rows leave the three NULL. Empty
-- last_error strings are stored as NULL.
-- Index: the unique (source, event_id) index decides the conflicts (with
-- .Gen, on a partitioned inbox, its (source, event_id, gen) twin in the
-- current partition, and the probe trigger the other partitions); the
-- primary key draws from the identity sequence (see driver.IdentityClash).
-- With .Reserve (a text/template): see the end of the file.
{{if .Reserve}}WITH ins AS (
{{end -}}
INSERT INTO inbox (source, event_id, event_type, key, payload, headers, status,
                   last_error, kafka_topic, kafka_partition, kafka_offset
{{- if .Reserve}},
                   attempts, available_at, lease_token, lease_expires_at, locked_by, claim_pos{{end}})
SELECT b.source, b.event_id, b.event_type, b.key, b.payload, b.headers::jsonb, b.status,
       NULLIF(b.last_error, ''),
       CASE WHEN b.kafka THEN b.source END,
       CASE WHEN b.kafka THEN b.kafka_partition END,
       CASE WHEN b.kafka THEN b.kafka_offset END
{{- if .Reserve}},
       CASE WHEN b.pos > 0 THEN 1 ELSE 0 END,
       CASE WHEN b.pos > 0 THEN now() + $14::bigint * interval '1 millisecond' ELSE now() END,
       CASE WHEN b.pos > 0 THEN $13::bigint END,
       CASE WHEN b.pos > 0 THEN now() + $14::bigint * interval '1 millisecond' END,
       CASE WHEN b.pos > 0 THEN $15::text END,
       NULLIF(b.pos, 0){{end}}
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bytea[], $6::text[],
            $7::text[], $8::text[], $9::int4[], $10::int8[], $11::bool[]{{if .Reserve}}, $12::int4[]{{end}})
     AS b(source, event_id, event_type, key, payload, headers, status,
          last_error, kafka_partition, kafka_offset, kafka{{if .Reserve}}, pos{{end}})
ON CONFLICT (source, event_id{{if .Gen}}, gen{{end}}) DO NOTHING
{{- if .Reserve}}
RETURNING id, claim_pos, received_at
)
SELECT count(*),
       coalesce(array_agg(id ORDER BY claim_pos) FILTER (WHERE claim_pos IS NOT NULL), '{}'),
       coalesce(array_agg(claim_pos ORDER BY claim_pos) FILTER (WHERE claim_pos IS NOT NULL), '{}'),
       coalesce(array_agg(received_at ORDER BY claim_pos) FILTER (WHERE claim_pos IS NOT NULL), '{}')
FROM ins
{{- end}}
-- (Kept short above: pg_stat_activity shows a statement's first 1,024
-- bytes, and the INSERT must be among them.)
-- With .Reserve, the rows handed off at ingest (b.pos > 0, its place in the
-- reservation) are written received with a reservation for this replica's
-- handlers (migration 013): the lease a claim would give (token $13, $14
-- ms, locked_by $15, claim_pos), attempts 1, and available_at at the
-- lease's end, so that claims skip the row until the reservation lapses.
-- The statement then returns one row: how many rows it inserted, and the
-- id, place and received_at of each reserved row it inserted (a duplicate
-- is not inserted, so never handed off).
