{{/* row_size, given a table alias: the bytes a claimed row weighs in the
worker's memory, counted against @max_bytes (INBOXD_CLAIM_BYTES): its
payload, key and headers (as the JSON text the worker reads). The Go side
counts the same for the rows it holds (claimedRow.size in event.go). */}}
{{- define "row_size" -}}
(octet_length({{.}}.payload) + coalesce(octet_length({{.}}.key), 0) + octet_length({{.}}.headers::text))
{{- end -}}
