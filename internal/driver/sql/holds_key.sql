{{/* holds_key, given a table alias: the row holds back the later rows of
its (source, key) on ordered routes (@ordered_types): it has a key and is
unfinished (received or processing), or dead on a route whose dead rows
block their key (@blocking_types). Claims, completions and the sweeper
that unparks rows all order keys by this one rule. Its first two
conditions are inbox_key_hash_idx's predicate, so that index serves the
lookups. */}}
{{- define "holds_key" -}}
{{.}}.key IS NOT NULL
  AND {{.}}.status IN ('received', 'processing', 'dead')
  AND {{.}}.event_type = ANY (@ordered_types::text[])
  AND ({{.}}.status <> 'dead' OR {{.}}.event_type = ANY (@blocking_types::text[]))
{{- end -}}

{{/* runs_key, given a table alias: the row is a processing row of an
ordered route's key. A key runs one row at a time: a claim refuses a key's
head while any row of its key is processing, whatever its id (a row
committed late, or requeued, has a lower id than a row of its key that was
claimed before it was visible). A subset of holds_key: the claim marks
runs_ordered the rows with a key of an ordered route it takes (claim.sql);
it is inbox_processing_key_idx's predicate (migration 009), so that small
index serves the lookups. */}}
{{- define "runs_key" -}}
{{.}}.status = 'processing'
  AND {{.}}.runs_ordered
  AND {{.}}.event_type = ANY (@ordered_types::text[])
{{- end -}}

{{/* key_hash, given a table alias: the 64-bit hash of the row's key that
inbox_key_hash_idx (migration 008) holds, on (source, key_hash, id): keys
of any length, where a B-tree on the key itself refuses entries over 2,704
bytes. A lookup of a key's rows matches source, the hash and then the key
itself (a collision costs a comparison, never a wrong row):
  e.source = r.source AND key_hash(e) = key_hash(r) AND e.key = r.key
The expression must stay exactly the index's for the planner to use it. */}}
{{- define "key_hash" -}}
hashtextextended(encode({{.}}.key, 'hex'), 0)
{{- end -}}
