package ingest

// MaxIdentifierBytes is the longest event id or event type accepted, in
// bytes. Longer ones make the message rejected: the unique index on
// (source, event_id) cannot hold arbitrarily long keys.
const MaxIdentifierBytes = 1024

// MaxKeyBytes is the longest message key accepted, in bytes; a longer key
// makes the message rejected, its key not stored. Keys are identifiers
// (an order id, a customer id, a composite business key): 4 KiB holds any
// of them with room to spare (the 3,000-byte key of a reliability report
// included) and keeps a key small next to the payloads, while every claimed
// row carries it and every ordered-key lookup compares it. The index of
// ordered keys holds a hash of the key, so the bound is about memory, not
// about the index.
const MaxKeyBytes = 4096

// MapOptions controls how messages, from any source, become rows.
type MapOptions struct {
	// EventIDHeaders are the headers tried, in order, for the event id.
	EventIDHeaders []string
	// EventTypeHeaders are the headers tried, in order, for the event type.
	EventTypeHeaders []string
	// EventIDJSONField, when set, is a top-level field of a JSON object
	// payload used for the event id when no header carries one.
	EventIDJSONField string
	// EventTypeJSONField is EventIDJSONField for the event type.
	EventTypeJSONField string
	// MaxPayload is the largest payload stored, in bytes; a bigger message
	// becomes a rejected row without its payload.
	MaxPayload int
	// MaxHeaders is the largest total of the headers' names and values a
	// message may carry, in bytes; a message with more becomes a rejected
	// row without its headers.
	MaxHeaders int
}

// DefaultMapOptions returns the mapping of the external contract: id from
// event_id then ce_id, type from event_type then ce_type, no JSON fallback,
// payloads up to 1 MiB, headers up to 64 KiB. A source takes these for the
// zero fields of its MapOptions (a nil header list is the default list; an
// empty non-nil one means no header is consulted).
func DefaultMapOptions() MapOptions {
	return MapOptions{
		EventIDHeaders:   []string{"event_id", "ce_id"},
		EventTypeHeaders: []string{"event_type", "ce_type"},
		MaxPayload:       DefaultMaxPayload,
		MaxHeaders:       DefaultMaxHeaders,
	}
}

// TombstoneHeader is the header that ingest adds, with the value "true", to
// the row of a tombstone: a message with a null value, the delete marker of
// a compacted topic, whose payload is stored empty like an empty value's.
// Only ingest sets it: a header of that name that a message carries is
// dropped, so the header is on exactly the rows of tombstones.
const TombstoneHeader = "inboxd-tombstone"
