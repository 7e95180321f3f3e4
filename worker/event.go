package worker

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// claimedRow is a row as returned by the claim statement, column by column.
type claimedRow struct {
	Rank       int64 // position in the claim's order, from 1
	ID         int64
	Source     string
	EventID    string
	EventType  string
	Key        []byte
	Payload    []byte
	Headers    []byte
	Attempts   int
	ReceivedAt time.Time
	Started    bool // handed straight to an idle handler: the database counts it started
}

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
// ignored: headers are informational and must not fail a row. One decoding
// pass: this runs for every row handed to a handler.
func decodeHeaders(raw []byte) map[string]string {
	if len(raw) <= 2 { // NULL, "" or {}
		return nil
	}
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
