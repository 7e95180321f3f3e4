-- Write the outcome of many rows at once. Each row is fenced by its lease
-- token: a row whose lease was lost (rescued, or claimed again) is not
-- touched, and its id is missing from the result.
--
-- Locking: the caller sends the rows sorted by id, and the update (a nested
-- loop over the arrays through the primary key) locks them in that order.
-- The other statements that lock several inbox rows never wait: claims,
-- rescues and lease renewals take them FOR UPDATE SKIP LOCKED. A completion
-- over rows [3,1] and a renewal over [1,2,3] once deadlocked, when renewals
-- waited. Locking the rows first in a `... ORDER BY id FOR UPDATE` CTE
-- would guarantee the order whatever the plan, but writes every row twice
-- (the lock, then the update) and made completions ten times slower; should
-- two completions ever deadlock (only stale ones crossing live ones can
-- meet), PostgreSQL aborts one and the completer retries it: the write is
-- fenced, so a retry applies nothing twice.
--
-- The fence is the lease token alone, on purpose: a row has a token while
-- it is processing, or received with a reservation (a row handed off at
-- ingest, migration 013: its outcome is fenced the same way), and never
-- once finished (the inbox_lease_check constraint); adding
-- `status = 'processing'` would also change the plan: it lets the
-- planner reach the rows through the partial index on processing rows, whose
-- statistics (taken while almost nothing was processing) say one row, and
-- then compare every processing row with every element of the batch. With
-- 200k retained rows a 1000-row completion took 6.5 s that way, instead of
-- 24 ms by primary key.
--
-- attempts_delta is -1 for a row released unattempted (shutdown, or a lease
-- at risk before its handler started): the claim counted an attempt that
-- did not happen.
--
-- History (.History, the variant for batches that hold any): the attempts
-- the rows' histories keep (migration 017: failed attempts, and the end
-- of a row that failed before) are written in the same statement, for the
-- rows it applied only (sql/attempts_record.sql), so that an entry commits
-- with its outcome or not at all. A batch of first-attempt successes, the
-- happy path, runs the variant without it.
--
-- Ordered routes: when a row with a key reaches its end, the next row of
-- its key is unparked in the same statement (sql/unpark_successors.sql;
-- this is a text/template, and that part is left out while the pool has no
-- ordered route).
{{if or .Ordered .History}}WITH done AS (
{{end -}}
UPDATE inbox AS i
SET status           = c.status,
    attempts         = greatest(i.attempts + c.attempts_delta, 0),
    available_at     = CASE WHEN c.status = 'received'
                            THEN now() + c.delay_ms * interval '1 millisecond'
                            ELSE i.available_at END,
    last_error       = coalesce(c.last_error, i.last_error),
    processed_at     = CASE WHEN c.status = 'processed' THEN now() ELSE NULL END,
    started          = false,
    lease_token      = NULL,
    lease_expires_at = NULL,
    locked_by        = NULL,
    updated_at       = now()
FROM unnest(@ids::bigint[], @tokens::bigint[], @statuses::text[], @delays_ms::bigint[],
            @errors::text[], @attempts_delta::integer[], @chained::boolean[])
     AS c(id, lease_token, status, delay_ms, last_error, attempts_delta, chained)
WHERE i.id = c.id
  AND i.lease_token = c.lease_token
RETURNING i.id{{if .Ordered}}, i.source, i.key, i.event_type, i.status, c.chained{{end}}
{{- if or .Ordered .History}}
){{if .Ordered}}, {{template "unpark_successors"}}{{end}}
{{- if .History}}, history AS (
    SELECT h.*, @history_worker::text AS worker
    FROM unnest(@history_ids::bigint[], @history_attempts::integer[], @history_started::timestamptz[],
                @history_finished::timestamptz[], @history_outcomes::text[], @history_errors::text[])
         AS h(row_id, attempt, started_at, finished_at, outcome, error)
    WHERE h.row_id IN (SELECT id FROM done)
), {{template "record_attempts" "history"}}
{{- end}}
SELECT id FROM done{{end}}
