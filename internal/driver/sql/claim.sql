-- Claim due rows for this worker in one short statement, oldest due first.
-- A text/template: the ordered routes' part (.Ordered) is left out while
-- the pool has no ordered route, which spares its planning and its
-- lookups (see sql.go).
--
-- Room: at most @window due rows read, @limit rows in all, and per route
-- no more than the room it has (a route is the routed event type, or ''
-- for every other type):
-- @room_routes/@room_counts/@idle_counts give each route's room and how many
-- of its rows go straight to idle handlers. Types of routes with no room are
-- not even read (@full_types; and only @open_types when the default route
-- has none, @default_open false), so a saturated route cannot fill a claim.
-- Bytes: no more than @max_bytes in all, each row weighing its payload,
-- key and headers (row_size.sql; the first row alone may exceed it when
-- @first_always, so a huge row is not stuck).
--
-- Started: a route's first idle_counts rows (chain followers aside, which
-- wait for the row before them) go straight to idle handlers;
-- they are marked started, so their attempt counts even if the worker dies
-- at once. The others wait in the worker's queue unstarted; should their
-- lease expire before their handler starts, the rescuer refunds the attempt.
--
-- Ordered routes (@ordered_types; @blocking_types are those whose dead rows
-- hold their key back): a row with a key is claimed only when no earlier
-- row of the same (source, key) among ordered types is unfinished (received
-- or processing, or dead on a blocking route), and no row of its key is
-- processing, whatever its id (sql/holds_key.sql's runs_key: the claim sees
-- only committed rows, so a row committed late, or requeued, can have a
-- lower id than a row of its key claimed before; it runs after that row,
-- never beside it; read through inbox_processing_key_idx). A later row whose nearest
-- earlier row is received or dead is parked: its available_at becomes
-- 9999-12-31, so that claims never read a blocked key's backlog again (it
-- sorts after every due row of the received index; a finite date rather
-- than 'infinity', which most clients cannot read into a time value). The
-- completion of the row before it unparks it. A row right behind a
-- processing one is left as it is, not even locked (that row is about to
-- finish).
--
-- Chains: with each key head it claims (an ordered row with no unfinished
-- row before it), the claim takes the next rows of the key, up to @chain,
-- through the key index (inbox_key_hash_idx), parked or due, as long as they
-- are received, of the head's type and not locked by another statement.
-- Each comes back with pred, the row before it: the worker starts it once
-- that row ended so that the key may go on, or gives it back unstarted.
-- A key's backlog then costs a claim per chain, not a park, an unpark and
-- a claim per row. Only chain rows that fit in @limit (heads and chains in
-- claim order) are locked; @window (the due rows read) is kept near the
-- number of heads the limit needs, by the caller.
--
-- Locking: candidates are locked FOR UPDATE SKIP LOCKED, so replicas never
-- wait on each other; candidates not taken are unlocked when the statement
-- ends. attempts stops at the schema's bound (1,000,000). @skip lists rows
-- whose data makes their claim fail and that could not be dead-lettered;
-- @only (when not 0) claims that one row, to confirm which row poisons a
-- claim before dead-lettering it.
WITH candidates AS (
    SELECT id, available_at, source, key, event_type,
           {{template "row_size" "inbox"}} AS size{{if .History}},
           lease_token, attempts, locked_by, updated_at, lease_expires_at{{end}}
    FROM inbox
    WHERE status = 'received'
      AND available_at <= now()
      AND id <> ALL (@skip::bigint[])
      AND (@only::bigint = 0 OR id = @only::bigint)
      AND ((@default_open::boolean AND event_type <> ALL (@full_types::text[]))
           OR event_type = ANY (@open_types::text[]))
{{- if .Ordered}}
      -- A row of an ordered key right behind a processing one can be
      -- neither taken nor parked (that row is about to finish, and its
      -- completion makes this one claimable): it is not even locked. Nor is
      -- a row with a processing row of its key after it (committed late,
      -- or requeued): it waits, due, until that row and its chain ended,
      -- and never runs beside them.
      AND (key IS NULL
           OR NOT event_type = ANY (@ordered_types::text[])
           OR ((SELECT e.status
                FROM inbox AS e
                WHERE e.source = inbox.source
                  AND {{template "key_hash" "e"}} = {{template "key_hash" "inbox"}}
                  AND e.key = inbox.key AND e.id < inbox.id
                  AND {{template "holds_key" "e"}}
                ORDER BY e.id DESC
                LIMIT 1) IS DISTINCT FROM 'processing'
               AND NOT EXISTS (
                   SELECT 1
                   FROM inbox AS r
                   WHERE r.source = inbox.source
                     AND {{template "key_hash" "r"}} = {{template "key_hash" "inbox"}}
                     AND r.key = inbox.key AND r.id > inbox.id
                     AND {{template "runs_key" "r"}})))
{{- end}}
    ORDER BY available_at, id
    LIMIT @window
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
          AND e.source = c.source
          AND {{template "key_hash" "e"}} = {{template "key_hash" "c"}}
          AND e.key = c.key AND e.id < c.id
          AND {{template "holds_key" "e"}}
        ORDER BY e.id DESC
        LIMIT 1
    ) AS before ON true
), following AS (
    -- The next unfinished rows of each ordered key whose head is claimed
    -- now, up to @chain, read through the key index: the chain candidates.
    -- A chain is the unbroken run of them that are received, of the head's
    -- type, and due or parked; it ends at the first row that is not.
    SELECT f.*
    FROM (SELECT f.*,
                 bool_and(f.status = 'received' AND f.event_type = f.head_type
                          AND (f.available_at <= now() OR f.available_at = '9999-12-31 00:00:00+00'))
                     OVER (PARTITION BY f.head ORDER BY f.pos) AS unbroken
          FROM (SELECT h.id AS head, h.event_type AS head_type, h.available_at AS head_at,
                       n.id, n.status, n.available_at, n.event_type, n.size,
                       row_number() OVER (PARTITION BY h.id ORDER BY n.id) AS pos
                FROM classified AS h
                CROSS JOIN LATERAL (
                    SELECT n.id, n.status, n.available_at, n.event_type,
                           {{template "row_size" "n"}} AS size
                    FROM inbox AS n
                    WHERE n.source = h.source
                      AND {{template "key_hash" "n"}} = {{template "key_hash" "h"}}
                      AND n.key = h.key AND n.id > h.id
                      AND {{template "holds_key" "n"}}
                      AND n.id <> ALL (@skip::bigint[])
                    ORDER BY n.id
                    LIMIT @chain
                ) AS n
                WHERE @chain::int > 0
                  AND h.before_status IS NULL
                  AND h.key IS NOT NULL
                  AND h.event_type = ANY (@ordered_types::text[])) AS f) AS f
    WHERE f.unbroken
), following_wanted AS (
    -- Only the chain rows that can fit in the claim (@limit rows in all,
    -- heads and chains in claim order) are locked: a lock is a write.
    SELECT w.id
    FROM (SELECT m.id, m.pos,
                 row_number() OVER (ORDER BY m.head_at, m.head, m.pos) AS rn
          FROM (SELECT h.id, h.available_at AS head_at, h.id AS head, 0::bigint AS pos
                FROM classified AS h
                WHERE h.before_status IS NULL
                UNION ALL
                SELECT f.id, f.head_at, f.head, f.pos
                FROM following AS f) AS m) AS w
    WHERE w.pos > 0 AND w.rn <= @limit
), following_locked AS (
    SELECT i.id
    FROM inbox AS i
    WHERE i.id = ANY (ARRAY(SELECT id FROM following_wanted))
      AND i.status = 'received'
      AND (i.available_at <= now() OR i.available_at = '9999-12-31 00:00:00+00')
    FOR UPDATE SKIP LOCKED
), chained AS (
    -- The chains as locked: each ends before its first row not locked now
    -- (taken by another statement, changed since, or beyond the claim).
    SELECT f.*
    FROM (SELECT f.*,
                 bool_and(l.id IS NOT NULL) OVER (PARTITION BY f.head ORDER BY f.pos) AS locked,
                 coalesce(lag(f.id) OVER (PARTITION BY f.head ORDER BY f.pos), f.head) AS pred
          FROM following AS f
          LEFT JOIN following_locked AS l ON l.id = f.id) AS f
    WHERE f.locked
), parked AS (
    UPDATE inbox AS i
    SET available_at = '9999-12-31 00:00:00+00', updated_at = now()
    FROM classified AS p
    WHERE i.id = p.id AND p.before_status IN ('received', 'dead')
      AND NOT EXISTS (SELECT 1 FROM chained AS ch WHERE ch.id = p.id)
    RETURNING i.id
), members AS (
    SELECT h.id, h.available_at, h.id AS head, 0::bigint AS pos, 0::bigint AS pred, h.size, h.route
    FROM classified AS h
    WHERE h.before_status IS NULL
    UNION ALL
    SELECT ch.id, h.available_at, h.id, ch.pos, ch.pred, ch.size, h.route
    FROM chained AS ch
    JOIN classified AS h ON h.id = ch.head
{{- else}}
           NULL::text AS before_status
    FROM candidates AS c
), members AS (
    SELECT h.id, h.available_at, h.id AS head, 0::bigint AS pos, 0::bigint AS pred, h.size, h.route
    FROM classified AS h
{{- end}}
), rooms AS (
    SELECT * FROM unnest(@room_routes::text[], @room_counts::int[], @idle_counts::int[]) AS r(route, room, idle)
), picked AS (
    SELECT m.id, m.route, m.pos, m.pred,
           row_number() OVER (ORDER BY m.available_at, m.head, m.pos) AS rn,
           row_number() OVER (PARTITION BY m.route ORDER BY m.available_at, m.head, m.pos) AS route_rank,
           -- Among a route's rows that are not chain followers: those the
           -- worker starts at once, idle handlers permitting.
           row_number() OVER (PARTITION BY m.route, m.pos = 0 ORDER BY m.available_at, m.head, m.pos) AS head_rank,
           sum(m.size) OVER (ORDER BY m.available_at, m.head, m.pos ROWS UNBOUNDED PRECEDING) AS through
    FROM members AS m
), claimed AS (
    UPDATE inbox AS i
    SET status           = 'processing',
        attempts         = least(i.attempts, 999999) + 1,
        started          = picked.pos = 0 AND picked.head_rank <= rooms.idle,
        lease_token      = @token,
        lease_expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
        locked_by        = @worker,
        claim_pos        = picked.rn::int,
{{- if .Ordered}}
        runs_ordered     = i.key IS NOT NULL AND i.event_type = ANY (@ordered_types::text[]),
{{- else}}
        runs_ordered     = NULL,
{{- end}}
        -- A lapsed reservation (a row handed off at ingest to a worker
        -- that did not renew it: migration 013) keeps its attempt, and
        -- gets the rescuer's reason, so that it is a suspect as a rescued
        -- row is (sql/rescue.sql, sql/suspects.sql); with .History (every
        -- claim but the bench's without history) that attempt is written
        -- to its history (the recorded CTE below).
        last_error       = CASE WHEN i.lease_token IS NOT NULL
                                THEN {{template "lost_reason" "i."}}
                                ELSE i.last_error END,
        updated_at       = now()
    FROM picked
    JOIN rooms USING (route)
    WHERE i.id = picked.id
      AND picked.route_rank <= rooms.room
      AND (picked.through <= @max_bytes::bigint OR (picked.rn = 1 AND @first_always::boolean))
    RETURNING picked.rn, picked.pred, i.id, i.source, i.event_id, i.event_type, i.key, i.payload, i.headers,
              i.attempts, i.received_at, i.started
)
{{- if .History}}, recorded AS (
    -- The lapsed reservations it took: their attempt, counted at the
    -- insert (its handler starts at once), is written to their histories
    -- as the rescuer writes a started attempt whose lease expired
    -- (sql/rescue.sql): outcome 'lease expired', the worker that held it,
    -- from the reservation (its insert: updated_at, which renewals leave
    -- alone) to its end, the reason above. Not a reservation, or one whose
    -- attempt was refunded (attempts 0): no entry. The old values are the
    -- candidates' (this statement's snapshot, before its update). A
    -- reservation's attempt is its row's first, so there is nothing to
    -- trim (sql/attempts_record.sql keeps the last 25). Measured
    -- (inboxd-bench -run history, EXPLAIN ANALYZE of a 500-row claim on a
    -- 50,000-row backlog): 0.07-0.11 ms more planning, no execution time
    -- beyond the noise; carrying the old values through the claim's CTEs
    -- to its RETURNING instead cost 0.5 ms of execution more.
    INSERT INTO inbox_attempts (row_id, attempt, started_at, finished_at, worker, outcome, error)
    SELECT c.id, c.attempts, c.updated_at, c.lease_expires_at, coalesce(c.locked_by, ''),
           'lease expired', {{template "lost_reason" "c."}}
    FROM candidates AS c
    WHERE c.lease_token IS NOT NULL AND c.attempts > 0
      AND c.id IN (SELECT id FROM claimed)
    ON CONFLICT (row_id, attempt) DO NOTHING
)
{{- end}}
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
