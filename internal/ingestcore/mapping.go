package ingestcore

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// Row statuses written by ingest.
const (
	// StatusReceived marks a row ready for the workers.
	StatusReceived = string(status.Received)
	// StatusRejected marks a row made from a message that could not be
	// accepted; it is kept for inspection and never handed to a handler.
	StatusRejected = string(status.Rejected)
)

// RejectReason says why a message became a rejected row. Its values are the
// label values of the rejected-rows metric.
type RejectReason string

// The reasons a message is rejected.
const (
	// RejectMissingID means no configured header or JSON field gave an event id.
	RejectMissingID RejectReason = "missing_id"
	// RejectInvalidID means the event id found is not valid UTF-8, holds a NUL
	// byte, is too long, or the JSON field is neither a string nor a number.
	RejectInvalidID RejectReason = "invalid_id"
	// RejectMissingType means no configured header or JSON field gave an
	// event type.
	RejectMissingType RejectReason = "missing_type"
	// RejectInvalidType is RejectInvalidID for the event type.
	RejectInvalidType RejectReason = "invalid_type"
	// RejectOversize means the payload is larger than MapOptions.MaxPayload,
	// the headers than MapOptions.MaxHeaders, or the key than MaxKeyBytes
	// (last_error says which).
	RejectOversize RejectReason = "oversize"
	// RejectRefused means the database refused the row itself (a data error
	// that validation did not foresee); a placeholder row was stored.
	RejectRefused RejectReason = "refused"
)

// LargestMessage is the most bytes a message accepted by o can carry: a
// payload, a key and headers each at its bound.
func LargestMessage(o ingest.MapOptions) int {
	return o.MaxPayload + o.MaxHeaders + ingest.MaxKeyBytes
}

// Row is one inbox row made from one message, whatever its source: the
// pipeline's row type.
type Row struct {
	// Source is the topic (Kafka) or the queue (RabbitMQ); with EventID it
	// is the row's unique key.
	Source string
	// EventID is the producer's event id, or for a rejected row RejectID,
	// else "<topic>/<partition>/<offset>".
	EventID string
	// EventType is the event type, or "" for a rejected row whose type is
	// unknown.
	EventType string
	// Key is the message key, nil when the message has none (stored as
	// NULL) or when it is longer than MaxKeyBytes (the row is rejected).
	Key []byte
	// Payload is the message value byte for byte, never nil; empty when it
	// is larger than MapOptions.MaxPayload (the row is rejected).
	Payload []byte
	// Headers is the JSON object stored in the headers column; {} when the
	// message's headers exceed MapOptions.MaxHeaders (the row is rejected).
	Headers []byte
	// Status is StatusReceived or StatusRejected.
	Status string
	// LastError explains a rejection; empty for accepted rows (stored as NULL).
	LastError string
	// Reason is the rejection's metric label; empty for accepted rows.
	Reason RejectReason
	// Kafka reports a row from Kafka: Partition and Offset are its
	// position (stored in kafka_partition and kafka_offset; NULL for other
	// sources).
	Kafka bool
	// Partition is the Kafka partition the message came from (0 for other
	// sources).
	Partition int32
	// Offset is the message's Kafka offset (0 for other sources).
	Offset int64
	// RejectID is the event id the message's rejected row (or placeholder)
	// takes, stable across redeliveries; "" means its Kafka position
	// (KafkaPositionID).
	RejectID string
}

// MapRow maps m, a message in the pipeline's terms, to its inbox row,
// for every source alike. It never fails: a message that cannot be accepted
// becomes a rejected row that says why, under the event id m.rejectID().
// opts must have its defaults applied.
func MapRow(m *Message, opts ingest.MapOptions) Row {
	row := Row{
		Source:    m.Source,
		Key:       m.Key,
		Payload:   m.Value,
		Status:    StatusReceived,
		Kafka:     m.Kafka,
		Partition: m.Partition,
		Offset:    m.Offset,
		RejectID:  m.RejectID,
	}
	if row.Payload == nil {
		row.Payload = []byte{}
	}

	// Sizes over their bounds: what is too big is not stored (nor searched
	// for JSON fields), what fits is.
	var problems []string
	oversizePayload := len(m.Value) > opts.MaxPayload
	var payload []byte
	if oversizePayload {
		sum := sha256.Sum256(m.Value)
		problems = append(problems, fmt.Sprintf("payload of %d bytes exceeds INBOXD_MAX_PAYLOAD (%d); sha256=%s",
			len(m.Value), opts.MaxPayload, hex.EncodeToString(sum[:])))
		row.Payload = []byte{}
	} else {
		payload = m.Value // only a payload we keep is searched for JSON fields
	}
	if len(m.Key) > ingest.MaxKeyBytes {
		sum := sha256.Sum256(m.Key)
		problems = append(problems, fmt.Sprintf("key of %d bytes exceeds the limit of %d bytes; sha256=%s",
			len(m.Key), ingest.MaxKeyBytes, hex.EncodeToString(sum[:])))
		row.Key = nil
	}
	if m.Unreadable != "" {
		problems = append(problems, fmt.Sprintf("headers of %d bytes exceed what the client reads: %s", m.UnreadableBytes, m.Unreadable))
	}
	if n := HeadersSize(m.Headers); n > opts.MaxHeaders {
		problems = append(problems, fmt.Sprintf("headers of %d bytes exceed INBOXD_MAX_HEADERS (%d)", n, opts.MaxHeaders))
		row.Headers = []byte("{}")
	} else {
		row.Headers = EncodeHeaders(RowHeaders(m))
	}
	oversize := len(problems) > 0

	fields := jsonFields{payload: payload}
	id, idReason, idErr := m.idPlaces(opts).find(m.Headers, &fields)
	typ, typReason, typErr := m.typePlaces(opts).find(m.Headers, &fields)

	switch {
	case oversize:
		row.Reason = RejectOversize
	case idReason != "":
		row.Reason = idReason
	case typReason != "":
		row.Reason = typReason
	}
	if !oversize {
		// An oversize message's id and type were looked up in its headers
		// (and a payload it keeps); its problem is its size.
		if idErr != "" {
			problems = append(problems, idErr)
		}
		if typErr != "" {
			problems = append(problems, typErr)
		}
	}
	if row.Reason == "" {
		row.EventID, row.EventType = id, typ
		return row
	}
	row.Status = StatusRejected
	row.EventID = row.RejectedID()
	if typReason == "" {
		row.EventType = typ
	}
	row.LastError = strings.Join(problems, "; ")
	return row
}

// RejectedID is the event id of the row's rejected form: its source's stable
// id for the message (Row.RejectID), else its position.
func (r Row) RejectedID() string {
	if r.RejectID != "" {
		return r.RejectID
	}
	return KafkaPositionID(r.Source, int(r.Partition), r.Offset)
}

// A rejected row's event id must be the same on every delivery of its
// message, or a redelivery adds a second row. Each source takes it from
// what its broker keeps of the message: Kafka its position, JetStream its
// stream sequence, a webhook its body; a RabbitMQ message has no position
// and gets ContentRejectID, a hash of its content less what the broker
// adds when it delivers or dead-letters a message again.

// redeliveryHeaders are the headers a broker adds to a message, or
// changes, when it delivers it again or moves it: RabbitMQ's quorum
// queues count deliveries in x-delivery-count (and, from 4.0,
// acquisitions in x-acquired-count), dead-lettering adds x-death and the
// x-first-death-* and x-last-death-* headers, a shovel stamps
// x-shovelled-timestamp. (The redelivered flag is not a header.)
var redeliveryHeaders = []string{
	"x-delivery-count", "x-acquired-count", "x-death",
	"x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
	"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason",
	"x-shovelled-timestamp",
}

// RedeliveryHeader reports whether a header called name is one of
// redeliveryHeaders, which a rejected row's id never depends on.
func RedeliveryHeader(name string) bool { return slices.Contains(redeliveryHeaders, name) }

// ContentRejectID is the event id of the rejected row of a message of
// source that has no position: "<source>/sha256/<hex>" over fields, its
// headers (in their order) less redeliveryHeaders, and its body, so that
// every delivery of one message, redelivered or dead-lettered back, finds
// the same row.
func ContentRejectID(source string, fields [][]byte, hs []Header, body []byte) string {
	h := sha256.New()
	for _, f := range fields {
		WriteField(h, f)
	}
	for _, x := range hs {
		if RedeliveryHeader(x.Key) {
			continue
		}
		WriteField(h, []byte(x.Key))
		WriteField(h, x.Value)
	}
	WriteField(h, body)
	return source + "/sha256/" + hex.EncodeToString(h.Sum(nil))
}

// IsContentRejectID reports whether id is one ContentRejectID gives a
// message of source: "<source>/sha256/<64 hex digits>" (a Kafka position
// id has a number where "sha256" stands).
func IsContentRejectID(source, id string) bool {
	sum, ok := strings.CutPrefix(id, source+"/sha256/")
	return ok && IsSHA256Hex(sum)
}

// IsSHA256Hex reports whether s is a SHA-256 in hex: 64 hex digits.
func IsSHA256Hex(s string) bool {
	if len(s) != hex.EncodedLen(sha256.Size) {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// WriteField hashes b after its length (8 bytes, little-endian), so that
// no two lists of fields hash the same bytes.
func WriteField(h hash.Hash, b []byte) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// HeadersSize is what MapOptions.MaxHeaders bounds: the bytes of the
// headers' names and values, as the message carries them.
func HeadersSize(hs []Header) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// size is what the row weighs against Config.BatchBytes: its payload, key
// and headers.
func (r Row) size() int { return len(r.Payload) + len(r.Key) + len(r.Headers) }

// oversizeProblem matches, in a rejected row's last_error, each size over
// its bound that MapMessage reported.
var oversizeProblem = regexp.MustCompile(`(?:^|; )(payload|key|headers) of \d+ bytes exceeds? `)

// Unstored returns what a rejected row's last_error says was over its bound
// and so not stored: "payload", "key" and/or "headers", in that order, or
// nothing. Mapping such a row again cannot restore its event.
func Unstored(lastError string) []string {
	var parts []string
	for _, m := range oversizeProblem.FindAllStringSubmatch(lastError, -1) {
		parts = append(parts, m[1])
	}
	return parts
}

// KafkaPositionID is the event id given to a rejected row of a Kafka message:
// "<topic>/<partition>/<offset>".
func KafkaPositionID(topic string, partition int, offset int64) string {
	return topic + "/" + strconv.Itoa(partition) + "/" + strconv.FormatInt(offset, 10)
}

// RowHeaders returns the headers stored for m: its own, less any called
// TombstoneHeader, and TombstoneHeader: true when m is a tombstone.
func RowHeaders(m *Message) []Header {
	hs := m.Headers
	if slices.ContainsFunc(hs, IsTombstoneHeader) {
		hs = slices.DeleteFunc(slices.Clone(hs), IsTombstoneHeader)
	}
	if m.Tombstone {
		hs = append(hs[:len(hs):len(hs)], Header{Key: ingest.TombstoneHeader, Value: []byte("true")})
	}
	return hs
}

func IsTombstoneHeader(h Header) bool { return h.Key == ingest.TombstoneHeader }

// placeKind is the kind of a place where an identifier is looked for, as
// last_error names it.
type placeKind string

const (
	placeProperty placeKind = "property"
	placeHeader   placeKind = "header"
	placeField    placeKind = "JSON field"
)

// identifierPlaces is the one list of the places where the mapping looks
// for an identifier (the event id or the event type) of a message, in the
// order it looks: the broker's property (AMQP's message_id or type), the
// headers, the JSON field, then the broker's fallback (JetStream's stream
// position or subject). find walks it, and last_error names the places
// from it, so that the two cannot drift.
type identifierPlaces struct {
	what                   string // "event id" or "event type"
	property, propertyName string // propertyName "": none
	headers                []string
	field                  string // "": none
	fallback, fallbackName string // fallbackName "": none
}

// idPlaces returns the places where m's event id is looked for.
func (m *Message) idPlaces(opts ingest.MapOptions) identifierPlaces {
	return identifierPlaces{what: "event id", property: m.EventID, propertyName: m.EventIDProperty,
		headers: opts.EventIDHeaders, field: opts.EventIDJSONField,
		fallback: m.EventIDFallback, fallbackName: m.EventIDFallbackProperty}
}

// typePlaces returns the places where m's event type is looked for.
func (m *Message) typePlaces(opts ingest.MapOptions) identifierPlaces {
	return identifierPlaces{what: "event type", property: m.EventType, propertyName: m.EventTypeProperty,
		headers: opts.EventTypeHeaders, field: opts.EventTypeJSONField,
		fallback: m.EventTypeFallback, fallbackName: m.EventTypeFallbackProperty}
}

// len is the number of places.
func (ps identifierPlaces) len() int {
	n := len(ps.headers)
	for _, name := range [...]string{ps.propertyName, ps.field, ps.fallbackName} {
		if name != "" {
			n++
		}
	}
	return n
}

// at returns the i-th place, 0 <= i < len(): its kind, its name and, for a
// property, its value.
func (ps identifierPlaces) at(i int) (kind placeKind, name, value string) {
	if ps.propertyName != "" {
		if i == 0 {
			return placeProperty, ps.propertyName, ps.property
		}
		i--
	}
	if i < len(ps.headers) {
		return placeHeader, ps.headers[i], ""
	}
	if i == len(ps.headers) && ps.field != "" {
		return placeField, ps.field, ""
	}
	return placeProperty, ps.fallbackName, ps.fallback // the last place
}

// find returns the identifier from the first place that holds a non-empty
// value, valid or not (an invalid value is rejected, never replaced by a
// later place's). Else it returns a reject reason and a sentence for
// last_error that names the places looked at, in the order they were.
func (ps identifierPlaces) find(hs []Header, fields *jsonFields) (string, RejectReason, string) {
	missing, invalid := RejectMissingID, RejectInvalidID
	if ps.what == "event type" {
		missing, invalid = RejectMissingType, RejectInvalidType
	}
	n := ps.len()
	for i := range n {
		kind, name, value := ps.at(i)
		var problem string
		switch kind {
		case placeHeader:
			v, ok := LastHeader(hs, name)
			if !ok || len(v) == 0 {
				continue
			}
			if problem = CheckIdentifier(v); problem == "" {
				return string(v), "", ""
			}
		case placeField:
			v, bad, ok := fields.get(name)
			if bad == "" && (!ok || v == "") {
				continue
			}
			if problem = bad; problem == "" {
				problem, value = CheckIdentifier([]byte(v)), v
			}
		default:
			if value == "" {
				continue
			}
			problem = CheckIdentifier([]byte(value))
		}
		if problem == "" {
			return value, "", ""
		}
		where := fmt.Sprintf("%s %s", kind, name)
		if i > 0 {
			where += " (after " + ps.describe(i) + ")"
		}
		return "", invalid, fmt.Sprintf("invalid %s in %s: %s", ps.what, where, problem)
	}
	return "", missing, fmt.Sprintf("missing %s (%s)", ps.what, ps.describe(n))
}

// describe names the first n places, in order, those of one kind in a row
// together: "property message_id; headers event_id, ce_id; JSON field id".
func (ps identifierPlaces) describe(n int) string {
	var b strings.Builder
	for i := 0; i < n; {
		kind, name, _ := ps.at(i)
		j := i + 1
		for ; j < n; j++ {
			if k, _, _ := ps.at(j); k != kind {
				break
			}
		}
		if i > 0 {
			b.WriteString("; ")
		}
		switch {
		case j-i == 1:
			b.WriteString(string(kind))
		case kind == placeProperty:
			b.WriteString("properties")
		default:
			b.WriteString(string(kind) + "s")
		}
		b.WriteString(" " + name)
		for k := i + 1; k < j; k++ {
			_, name, _ := ps.at(k)
			b.WriteString(", " + name)
		}
		i = j
	}
	return b.String()
}

// CheckIdentifier says what is wrong with an event id or type, or "".
func CheckIdentifier(v []byte) string {
	switch {
	case len(v) > ingest.MaxIdentifierBytes:
		return fmt.Sprintf("%d bytes, longer than %d", len(v), ingest.MaxIdentifierBytes)
	case !utf8.Valid(v):
		return "not valid UTF-8"
	case bytes.IndexByte(v, 0) >= 0:
		return "contains a NUL byte"
	}
	return ""
}

// LastHeader returns the value of the last header called name.
func LastHeader(hs []Header, name string) ([]byte, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == name {
			return hs[i].Value, true
		}
	}
	return nil, false
}

// JSONField is the top-level field name of payload, a JSON object: its
// value as text, or the problem that makes it unusable as an identifier;
// ok is false when payload has no such field.
func JSONField(payload []byte, name string) (value, problem string, ok bool) {
	f := jsonFields{payload: payload}
	return f.get(name)
}

// jsonFields parses a payload's top-level JSON fields once, on first use.
type jsonFields struct {
	payload []byte
	parsed  bool
	fields  map[string]json.RawMessage
}

// get returns a top-level field as text (a string's value or a number's
// literal), a problem if the field is there but unusable, and whether it was
// there at all.
func (f *jsonFields) get(name string) (value, problem string, ok bool) {
	if !f.parsed {
		f.parsed = true
		if len(f.payload) > 0 {
			// Into a variable of its own: &f.fields would make every
			// message's jsonFields escape to the heap, parsed or not.
			var fields map[string]json.RawMessage
			_ = json.Unmarshal(f.payload, &fields) // not a JSON object: no fields
			f.fields = fields
		}
	}
	raw, ok := f.fields[name]
	if !ok {
		return "", "", false
	}
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", "not a valid JSON string", true
		}
		return s, "", true
	case len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')):
		return string(raw), "", true
	case string(raw) == "null":
		return "", "", false
	default:
		return "", "neither a string nor a number", true
	}
}

// EncodeHeaders renders headers as the JSON object stored in the headers
// column: {name: value}, the last value winning for a repeated name. A value
// that is not valid UTF-8 or holds a NUL byte (which jsonb cannot store)
// becomes {"base64": "..."}. Names are made valid UTF-8 without NUL bytes,
// replacing offending bytes with U+FFFD.
func EncodeHeaders(hs []Header) []byte {
	if len(hs) == 0 {
		return []byte("{}")
	}
	if b, ok := appendPlainHeaders(make([]byte, 0, 64*len(hs)), hs); ok {
		return b
	}
	return EncodeHeadersJSON(hs)
}

// maxPlainHeaders is how many headers appendPlainHeaders takes (it looks
// for repeated names pairwise).
const maxPlainHeaders = 16

// appendPlainHeaders writes the usual headers (a few, names distinct,
// names and values valid UTF-8 without NUL bytes) as a JSON object without
// encoding/json, which took a twentieth of the daemon's CPU end to end;
// ok is false for anything else. The object holds the same values as
// EncodeHeadersJSON's (FuzzEncodeHeaders compares them).
func appendPlainHeaders(b []byte, hs []Header) (_ []byte, ok bool) {
	if len(hs) > maxPlainHeaders {
		return nil, false
	}
	b = append(b, '{')
	for i, h := range hs {
		if !plainJSONText(h.Key) || !plainJSONBytes(h.Value) {
			return nil, false
		}
		for _, prev := range hs[:i] {
			if prev.Key == h.Key {
				return nil, false
			}
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, h.Key)
		b = append(b, ':')
		b = appendJSONString(b, string(h.Value))
	}
	return append(b, '}'), true
}

func plainJSONText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

func plainJSONBytes(v []byte) bool { return utf8.Valid(v) && bytes.IndexByte(v, 0) < 0 }

// appendJSONString appends s, valid UTF-8, as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// EncodeHeadersJSON is EncodeHeaders through encoding/json, for any headers.
func EncodeHeadersJSON(hs []Header) []byte {
	obj := make(map[string]any, len(hs))
	for _, h := range hs {
		name := h.Key
		if !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
			name = strings.ReplaceAll(strings.ToValidUTF8(name, "\uFFFD"), "\x00", "\uFFFD")
		}
		if utf8.Valid(h.Value) && bytes.IndexByte(h.Value, 0) < 0 {
			obj[name] = string(h.Value)
		} else {
			obj[name] = map[string]string{"base64": base64.StdEncoding.EncodeToString(h.Value)}
		}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		// Strings and maps of strings always marshal.
		panic(fmt.Sprintf("ingest: encode headers: %v", err))
	}
	return b
}
