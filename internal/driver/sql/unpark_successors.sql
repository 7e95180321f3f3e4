{{/* The CTEs that unpark the next row of each finished key, after a CTE
named done that returns the finished rows' id, source, key, event_type and
status: complete.sql and complete_tx.sql use them on ordered routes.

Ordered routes (@ordered_types; @blocking_types keep a key stopped on a
dead row): when a row with a key reaches its end (processed, or dead on a
route that does not block), the next unfinished row of the same
(source, key) is unparked (see claim.sql), in the same statement. The
successor is looked up past the finished row's id: in this statement's
snapshot the finished row itself still looks processing. The update of the
successor always takes its row lock (a no-op when it is not parked), so
that a claim parking it at this very moment is waited for and then undone.
A row whose next row was claimed with it (done.chained: the worker holds
that row in its key's chain, and runs it or gives it back due) needs no
unparking.
*/}}
{{- define "unpark_successors" -}}
successors AS (
    SELECT (SELECT n.id
            FROM inbox AS n
            WHERE n.source = d.source
              AND {{template "key_hash" "n"}} = {{template "key_hash" "d"}}
              AND n.key = d.key AND n.id > d.id
              AND {{template "holds_key" "n"}}
            ORDER BY n.id
            LIMIT 1) AS id
    FROM done AS d
    WHERE d.key IS NOT NULL
      AND NOT d.chained
      AND d.event_type = ANY (@ordered_types::text[])
      AND (d.status = 'processed' OR (d.status = 'dead' AND NOT d.event_type = ANY (@blocking_types::text[])))
), unparked AS (
    UPDATE inbox AS u
    SET available_at = CASE WHEN u.available_at = '9999-12-31 00:00:00+00' THEN now() ELSE u.available_at END
    FROM successors AS s
    WHERE u.id = s.id AND u.status = 'received'
    RETURNING u.id
)
{{- end -}}
