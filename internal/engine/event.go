package engine

import (
	"encoding/base64"
	"encoding/json"
	"unicode/utf8"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
)

// claimedRow is a row as returned by the claim statement
// (driver.ClaimedRow), with what the engine derives from it.
type claimedRow struct{ driver.ClaimedRow }

// size is what the row weighs against worker.Config.ClaimBytes while the worker
// holds it: its payload, key and headers, as sql/row_size.sql counts them
// in the claim.
func (r *claimedRow) size() int64 { return int64(len(r.Payload) + len(r.Key) + len(r.Headers)) }

// event converts the row into what handlers see.
func (r *claimedRow) event() *handlers.Event {
	return &handlers.Event{
		ID:         r.ID,
		Source:     r.Source,
		EventID:    r.EventID,
		EventType:  r.EventType,
		Key:        r.Key,
		Payload:    r.Payload,
		Headers:    decodeHeaders(r.Headers),
		Attempt:    r.Attempts,
		ReceivedAt: r.ReceivedAt,
	}
}

// decodeHeaders reads the headers column: an object whose values are strings,
// or {"base64": "…"} for values that were not valid UTF-8. Anything else is
// ignored: headers are informational and must not fail a row. It runs for
// every row handed to a handler, so the usual column (string values without
// escapes, as PostgreSQL prints jsonb) is read by a scanner of its own; any
// other input goes through encoding/json, with the same result
// (FuzzDecodeHeaders compares the two).
func decodeHeaders(raw []byte) map[string]string {
	if len(raw) <= 2 { // NULL, "" or {}
		return nil
	}
	if out, ok := scanPlainHeaders(raw); ok {
		return out
	}
	return decodeHeadersJSON(raw)
}

// decodeHeadersJSON is decodeHeaders through encoding/json, for any input.
func decodeHeadersJSON(raw []byte) map[string]string {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil || len(obj) == 0 {
		return nil
	}
	out := make(map[string]string, len(obj))
	for k, v := range obj {
		switch v := v.(type) {
		case string:
			out[k] = v
		case map[string]any:
			if b, ok := v["base64"].(string); ok {
				if dec, err := base64.StdEncoding.DecodeString(b); err == nil {
					out[k] = string(dec)
				}
			}
		}
	}
	return out
}

// scanPlainHeaders reads raw when it is a JSON object whose keys and values
// are all strings without escapes, control characters or invalid UTF-8;
// ok is false for anything else, which the caller decodes in full.
//
// The keys and values are substrings of one copy of raw: one allocation
// for the row's headers instead of two per header (they are kept as long as
// the map is, and are most of raw anyway).
func scanPlainHeaders(raw []byte) (out map[string]string, ok bool) {
	var text string // raw as a string, copied once a header is found
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return nil, skipSpace(raw, i+1) == len(raw) // {} is no headers
	}
	for {
		ks, ke, next, ok := plainString(raw, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(raw, next)
		if i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		vs, ve, next, ok := plainString(raw, skipSpace(raw, i+1))
		if !ok {
			return nil, false
		}
		if out == nil {
			text = string(raw)
			out = make(map[string]string, 4)
		}
		out[text[ks:ke]] = text[vs:ve]
		i = skipSpace(raw, next)
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return out, skipSpace(raw, i+1) == len(raw)
		default:
			return nil, false
		}
	}
}

// plainString reads the JSON string starting at raw[i] when it has no
// escape, no control character and only valid UTF-8: its text is
// raw[start:end], and next is the index after its closing quote.
func plainString(raw []byte, i int) (start, end, next int, ok bool) {
	if i >= len(raw) || raw[i] != '"' {
		return 0, 0, 0, false
	}
	for j := i + 1; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '"':
			if !utf8.Valid(raw[i+1 : j]) {
				return 0, 0, 0, false
			}
			return i + 1, j, j + 1, true
		case c == '\\' || c < 0x20:
			return 0, 0, 0, false
		}
	}
	return 0, 0, 0, false
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}
