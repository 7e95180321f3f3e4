-- 011: the outbox, the producer's half. A service (or an inbox handler,
-- through its transaction) inserts a row in the same transaction as the
-- changes it describes; the relay of `inboxd run` (INBOXD_OUTBOX=true)
-- publishes it to its destination and marks it published. Nothing
-- committed is lost, nothing rolled back is published.
--
-- The relay reads rows by status, never "above the last id sent": a row
-- whose transaction commits after a higher id was published is still
-- pending, and the next read finds it (no late commit is skipped).
--
-- Ordering: rows of one (destination, key) are published one relay at a
-- time, in id order among the rows committed when the relay reads them. The
-- rows are spread over the 32 shards of outbox_shards by a hash of
-- destination and key (of destination and event id for rows without a
-- key); a relay publishes a shard only under that shard's lease, and its
-- writes to the rows are fenced by the lease's token.
--
-- Expand only: binaries of schemas 1 to 10 do not know these tables.
-- inboxd:oldest-compatible-schema 1
CREATE TABLE IF NOT EXISTS outbox (
    -- Assigned at insert, from a sequence: the order of a key's rows.
    id           bigserial PRIMARY KEY,
    -- kafka:<topic>, amqp:<exchange>/<routing key> (an empty exchange is
    -- the default exchange) or nats:<subject>.
    destination  text NOT NULL,
    -- Sent as the event_id header (and as the AMQP message_id and the NATS
    -- Nats-Msg-Id), so that a downstream inbox deduplicates re-publications.
    event_id     text NOT NULL DEFAULT gen_random_uuid()::text,
    -- Sent as the event_type header (and as the AMQP type property).
    event_type   text NOT NULL,
    -- The ordering key: the Kafka message key, the AMQP and NATS "key"
    -- header. NULL: no key, no order.
    key          text,
    -- More headers, a JSON object of strings.
    headers      jsonb NOT NULL DEFAULT '{}'::jsonb,
    payload      bytea NOT NULL DEFAULT ''::bytea,
    -- pending, published or dead.
    status       text NOT NULL DEFAULT 'pending',
    -- Publications that got the broker's verdict: a refusal or the final
    -- acknowledgement. A broker that cannot be reached costs none.
    attempts     integer NOT NULL DEFAULT 0,
    -- The last refusal's reason.
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- A refused row is retried from then; its key's later rows wait.
    available_at timestamptz NOT NULL DEFAULT now(),
    -- When the broker acknowledged it.
    published_at timestamptz,
    -- A hash of destination and key, the key's identity in the indexes
    -- (a long key never makes a row unstorable). NULL without a key.
    key_hash     bigint GENERATED ALWAYS AS (hashtextextended(destination || E'\x1f' || key, 0)) STORED,
    -- Which of the 32 shards the row belongs to.
    shard        smallint NOT NULL GENERATED ALWAYS AS (
        ((hashtextextended(destination || E'\x1f' || coalesce(key, E'\x1e' || event_id), 0) % 32 + 32) % 32)::smallint
    ) STORED,
    CONSTRAINT outbox_status_check CHECK (status IN ('pending', 'published', 'dead')),
    CONSTRAINT outbox_destination_check CHECK (
        destination ~ '^(kafka:[A-Za-z0-9._-]{1,249}|amqp:[^/]{0,255}/.{0,255}|nats:[^[:space:]*>]+)$'),
    CONSTRAINT outbox_event_id_check CHECK (event_id <> ''),
    CONSTRAINT outbox_event_type_check CHECK (event_type <> ''),
    CONSTRAINT outbox_headers_check CHECK (jsonb_typeof(headers) = 'object')
);

-- The relay's reads: pending rows in id order.
CREATE INDEX IF NOT EXISTS outbox_pending_idx ON outbox (id) WHERE status = 'pending';
-- A refused row (pending, attempts > 0) holds back its key's later rows:
-- the claim reads the few refused rows through this small index.
CREATE INDEX IF NOT EXISTS outbox_refused_idx ON outbox (key_hash, id)
    WHERE status = 'pending' AND attempts > 0;
-- Retention of published rows.
CREATE INDEX IF NOT EXISTS outbox_published_idx ON outbox (published_at) WHERE status = 'published';
-- `inboxd outbox dead`.
CREATE INDEX IF NOT EXISTS outbox_dead_idx ON outbox (id) WHERE status = 'dead';

-- One row per shard: who publishes it, until when, under which token.
CREATE TABLE IF NOT EXISTS outbox_shards (
    shard      smallint PRIMARY KEY,
    owner      text,
    token      bigint NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO outbox_shards (shard) SELECT generate_series(0, 31) ON CONFLICT DO NOTHING;

-- The relays alive, so that each takes its share of the shards.
CREATE TABLE IF NOT EXISTS outbox_relays (
    relay   text PRIMARY KEY,
    seen_at timestamptz NOT NULL
);

---- create above / drop below ----

DROP TABLE IF EXISTS outbox_relays;
DROP TABLE IF EXISTS outbox_shards;
DROP TABLE IF EXISTS outbox;
