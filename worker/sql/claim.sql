-- Claim due rows for this worker in one short statement, oldest due first.
-- A text/template: the ordered routes' part (.Ordered) is left out while
-- the pool has no ordered route, which spares its planning and its
-- lookups (see sql.go).
--
-- Room: at most @limit rows in all, and per route no more than the room it
-- has (a route is the routed event type, or '' for every other type):
-- @room_routes/@room_counts/@idle_counts give each route's room and how many
-- of its rows go straight to idle handlers. Types of routes with no room are
-- not even read (@full_types; and only @open_types when the default route
-- has none, @default_open false), so a saturated route cannot fill a claim.
-- Bytes: no more than @max_bytes of payload and key in all (the first row
-- alone may exceed it when @first_always, so a huge row is not stuck).
--
-- Started: a route's first idle_counts rows go straight to idle handlers;
-- they are marked started, so their attempt counts even if the worker dies
-- at once. The others wait in the worker's queue unstarted; should their
-- lease expire before their handler starts, the rescuer refunds the attempt.
--
-- Ordered routes (@ordered_types; @blocking_types are those whose dead rows
-- hold their key back): a row with a key is claimed only when no earlier
-- row of the same (source, key) among ordered types is unfinished (received
-- or processing, or dead on a blocking route). A later row whose nearest
-- earlier row is received or dead is parked: its available_at becomes
-- 9999-12-31, so that claims never read a blocked key's backlog again (it
-- sorts after every due row of the received index; a finite date rather
-- than 'infinity', which most clients cannot read into a time value). The
-- completion of the row before it unparks it. A row behind a processing one
-- is left as it is, and read again by the next claim (that processing row
-- is about to finish).
--
-- Locking: candidates are locked FOR UPDATE SKIP LOCKED, so replicas never
-- wait on each other; candidates not taken are unlocked when the statement
-- ends. attempts stops at the schema's bound (1,000,000). @skip lists rows
-- whose data makes their claim fail and that could not be dead-lettered;
-- @only (when not 0) claims that one row, to confirm which row poisons a
-- claim before dead-lettering it.
WITH candidates AS (
    SELECT id, available_at, source, key, event_type,
           octet_length(payload) + coalesce(octet_length(key), 0) AS size
    FROM inbox
    WHERE status = 'received'
      AND available_at <= now()
      AND id <> ALL (@skip::bigint[])
      AND (@only::bigint = 0 OR id = @only::bigint)
      AND ((@default_open::boolean AND event_type <> ALL (@full_types::text[]))
           OR event_type = ANY (@open_types::text[]))
    ORDER BY available_at, id
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
), classified AS (
    SELECT c.*,
           CASE WHEN c.event_type = ANY (@routed_types::text[]) THEN c.event_type ELSE '' END AS route,
{{- if .Ordered}}
           before.status AS before_status
    FROM candidates AS c
    LEFT JOIN LATERAL (
        SELECT e.status
        FROM inbox AS e
        WHERE c.key IS NOT NULL
          AND c.event_type = ANY (@ordered_types::text[])
          AND e.source = c.source AND e.key = c.key AND e.id < c.id
          AND e.key IS NOT NULL
          AND e.status IN ('received', 'processing', 'dead')
          AND e.event_type = ANY (@ordered_types::text[])
          AND (e.status <> 'dead' OR e.event_type = ANY (@blocking_types::text[]))
        ORDER BY e.id DESC
        LIMIT 1
    ) AS before ON true
), parked AS (
    UPDATE inbox AS i
    SET available_at = '9999-12-31 00:00:00+00', updated_at = now()
    FROM classified AS p
    WHERE i.id = p.id AND p.before_status IN ('received', 'dead')
    RETURNING i.id
{{- else}}
           NULL::text AS before_status
    FROM candidates AS c
{{- end}}
), rooms AS (
    SELECT * FROM unnest(@room_routes::text[], @room_counts::int[], @idle_counts::int[]) AS r(route, room, idle)
), picked AS (
    SELECT h.id, h.route,
           row_number() OVER (ORDER BY h.available_at, h.id) AS rn,
           row_number() OVER (PARTITION BY h.route ORDER BY h.available_at, h.id) AS route_rank,
           sum(h.size) OVER (ORDER BY h.available_at, h.id ROWS UNBOUNDED PRECEDING) AS through
    FROM classified AS h
    WHERE h.before_status IS NULL
), claimed AS (
    UPDATE inbox AS i
    SET status           = 'processing',
        attempts         = least(i.attempts, 999999) + 1,
        started          = picked.route_rank <= rooms.idle,
        lease_token      = @token,
        lease_expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
        locked_by        = @worker,
        updated_at       = now()
    FROM picked
    JOIN rooms USING (route)
    WHERE i.id = picked.id
      AND picked.route_rank <= rooms.room
      AND (picked.through <= @max_bytes::bigint OR (picked.rn = 1 AND @first_always::boolean))
    RETURNING picked.rn, i.id, i.source, i.event_id, i.event_type, i.key, i.payload, i.headers,
              i.attempts, i.received_at, i.started
)
{{- if .Ordered}}
-- One row per claimed row, each with the number of rows parked; a single
-- row of NULLs when none was claimed, so that the caller learns the parked
-- count either way (parking alone is progress: claim again).
SELECT p.n AS parked, c.*
FROM (SELECT count(*) AS n FROM parked) AS p
LEFT JOIN claimed AS c ON true
{{- else}}
SELECT 0::bigint AS parked, c.*
FROM claimed AS c
{{- end}}
