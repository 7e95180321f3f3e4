{{/* record_attempts, given the name of a relation with the columns
row_id, attempt, started_at, finished_at, worker, outcome and error: the
CTEs that write those attempts to the rows' histories (migration 017) and
keep the last 25 of each row (driver.KeptAttempts). An attempt already
recorded (a retried write) is left as it is; the entries 25 attempts or
more older than the one written are deleted (in the statement's snapshot,
without the one being written). attempts_insert.sql, the completions
(complete.sql with .History) and the rescue (rescue.sql) write their
entries through these; the claim of a
lapsed reservation (claim.sql) inserts its one first attempt itself, with
nothing to trim. Index: the primary key (row_id, attempt), for the insert
and the trim. */}}
{{- define "record_attempts" -}}
attempts_recorded AS (
    INSERT INTO inbox_attempts (row_id, attempt, started_at, finished_at, worker, outcome, error)
    SELECT row_id, attempt, started_at, finished_at, worker, outcome, error
    FROM {{.}}
    ON CONFLICT (row_id, attempt) DO NOTHING
), attempts_trimmed AS (
    DELETE FROM inbox_attempts AS h
    USING {{.}} AS a
    WHERE h.row_id = a.row_id AND h.attempt <= a.attempt - 25
)
{{- end -}}

{{/* lost_reason, given the prefix of the columns attempts and locked_by
of a row as it was before the statement ("i." for table alias i): the
last_error, and the history's error, of an attempt whose lease expired, as
the rescuer (rescue.sql) and the claim of a lapsed reservation (claim.sql)
write it; it begins with @expired_prefix, which the claim's suspects
lookup reads back (suspects.sql). */}}
{{- define "lost_reason" -}}
@expired_prefix::text || {{.}}attempts || ' (worker ' || coalesce({{.}}locked_by, 'unknown') || ' lost the row)'
{{- end -}}
