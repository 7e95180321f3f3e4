{{/* holds_key, given a table alias: the row holds back the later rows of
its (source, key) on ordered routes (@ordered_types): it has a key and is
unfinished (received or processing), or dead on a route whose dead rows
block their key (@blocking_types). Claims, completions and the sweeper
that unparks rows all order keys by this one rule. Its first two
conditions are inbox_key_idx's predicate, so that index serves the
lookups. */}}
{{- define "holds_key" -}}
{{.}}.key IS NOT NULL
  AND {{.}}.status IN ('received', 'processing', 'dead')
  AND {{.}}.event_type = ANY (@ordered_types::text[])
  AND ({{.}}.status <> 'dead' OR {{.}}.event_type = ANY (@blocking_types::text[]))
{{- end -}}
