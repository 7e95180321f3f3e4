package riverjob

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/inboxd/inboxd/handlers"
)

// EventArgs is the JSON object every job of a river route carries as its
// args (see the package documentation for an example). Go workers embed it
// in their own args type, whose Kind method returns the route's kind:
//
//	type PaymentCaptured struct{ riverjob.EventArgs }
//
//	func (PaymentCaptured) Kind() string { return "payment_captured" }
type EventArgs struct {
	// EventID is the event's id, unique within Source ("event_id").
	EventID string `json:"event_id"`
	// EventType is the event's type ("event_type").
	EventType string `json:"event_type"`
	// Source is where the event came from, the Kafka topic for ingested
	// events ("source").
	Source string `json:"source"`
	// Key is the Kafka message key ("key": base64, as encoding/json writes
	// []byte; null when the message had no key).
	Key []byte `json:"key"`
	// Payload is the payload when it is JSON that PostgreSQL's jsonb
	// accepts ("payload", omitted otherwise). It is the same JSON value, not
	// necessarily the same bytes: jsonb does not keep whitespace, key order
	// or repeated keys.
	Payload json.RawMessage `json:"payload,omitempty"`
	// PayloadBase64 is the payload when it is not such JSON
	// ("payload_base64": base64; omitted when Payload is used or the payload
	// is empty).
	PayloadBase64 []byte `json:"payload_base64,omitempty"`
}

// NewEventArgs returns the args of ev's job: its id, type, source and key,
// and its payload in Payload when it is JSON that jsonb accepts, in
// PayloadBase64 otherwise.
func NewEventArgs(ev *handlers.Event) EventArgs {
	a := EventArgs{EventID: ev.EventID, EventType: ev.EventType, Source: ev.Source, Key: ev.Key}
	if jsonbCompatible(ev.Payload) {
		a.Payload = json.RawMessage(ev.Payload)
	} else if len(ev.Payload) > 0 {
		a.PayloadBase64 = ev.Payload
	}
	return a
}

// PayloadBytes returns the payload, whichever field carries it: Payload's
// JSON (as decoded from the job, see Payload) or PayloadBase64's bytes; nil
// for an empty payload.
func (a EventArgs) PayloadBytes() []byte {
	if len(a.Payload) > 0 {
		return a.Payload
	}
	return a.PayloadBase64
}

// jobArgs is what InsertJob hands River: the event's args under the route's
// kind. Its JSON is EventArgs' alone (kind is unexported).
type jobArgs struct {
	kind string
	EventArgs
}

// Kind returns the route's kind.
func (a jobArgs) Kind() string { return a.kind }

// jsonbCompatible reports whether p can travel as JSON in River's jsonb
// args column: valid JSON, valid UTF-8 (encoding/json would otherwise
// replace the bad bytes, and PostgreSQL refuses them), and no string escape
// that jsonb refuses: \u0000 and UTF-16 surrogate escapes that are not a
// high surrogate followed by a low one.
func jsonbCompatible(p []byte) bool {
	if len(p) == 0 || !utf8.Valid(p) || !json.Valid(p) {
		return false
	}
	inString := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			i++ // p is valid JSON: an escape is complete
			if p[i] != 'u' {
				continue
			}
			r := hex4(p[i+1 : i+5])
			i += 4
			switch {
			case r == 0:
				return false
			case r >= 0xDC00 && r <= 0xDFFF: // a low surrogate with no high one before it
				return false
			case r >= 0xD800 && r <= 0xDBFF: // a high surrogate: a low one must follow
				if i+6 >= len(p) || p[i+1] != '\\' || p[i+2] != 'u' {
					return false
				}
				if lo := hex4(p[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
					return false
				}
				i += 6
			}
		}
	}
	return true
}

// hex4 decodes four hexadecimal digits (valid JSON guarantees them).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
