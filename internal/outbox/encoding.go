package outbox

import (
	"fmt"
	"net/textproto"
	"strings"

	"github.com/inboxd/inboxd/internal/brokers/amqpwire"
)

// The encoding rules of the brokers' clients, without the clients: Emit
// checks a message against them (Validate) in a program that links none,
// and the publishers before they send.

// DefaultAMQPFrameSize is the largest frame assumed before the first
// connection tells the one negotiated: RabbitMQ's default frame_max, and
// amqp091-go's.
const DefaultAMQPFrameSize = 131072

// AMQPMaxTableEntries is the most entries amqp091-go reads in a headers
// table: a message with more closes its consumer's connection (inboxd's
// own RabbitMQ source uses amqp091-go).
const AMQPMaxTableEntries = 8192

// AMQPEncodable returns why amqp091-go could not send m within frames of
// frameMax bytes, or a consumer on amqp091-go read it (none when it can):
// a shortstr over 255 bytes (message_id, type, a property, a header's
// name), a property's value it cannot be, a CC or BCC header (RabbitMQ
// closes the channel on one that is not an array), a headers table of more
// than 8,192 entries, properties too large for one frame. The frame's size
// is the content header as amqp091-go writes it: the frame's 8 bytes, the
// content header's 14 and the properties set (shortstrs with their length
// byte, the headers table of long strings, the delivery mode, the
// timestamp).
func AMQPEncodable(m Message, frameMax int) []string {
	var why []string
	shortstr := func(what, v string) {
		if len(v) > amqpwire.MaxShortstr {
			why = append(why, fmt.Sprintf("amqp: %s of %d bytes, over the %d of an AMQP shortstr", what, len(v), amqpwire.MaxShortstr))
		}
	}
	shortstr("message_id (the event id)", m.EventID)
	shortstr("type (the event type)", m.EventType)
	size := 8 + 14 + 1 // frame, content header, delivery mode
	for _, s := range []string{m.EventID, m.EventType} {
		if s != "" {
			size += 1 + len(s)
		}
	}
	table := map[string]string{}
	for _, h := range m.Headers {
		if amqpwire.IsProperty(h.Key) {
			n, err := amqpwire.CheckProperty(h.Key, h.Value)
			if err != nil {
				why = append(why, "amqp: "+err.Error())
			}
			size += n
			continue
		}
		switch {
		case len(h.Key) > amqpwire.MaxShortstr:
			shortstr(fmt.Sprintf("header name %.40q…", h.Key), h.Key)
		case h.Key == "CC" || h.Key == "BCC":
			// RabbitMQ's sender-selected routing: it closes the channel on
			// one that is not an array of routing keys, and a header here
			// is a string.
			why = append(why, fmt.Sprintf("amqp: header %s: RabbitMQ takes it as an array of routing keys, never a string", h.Key))
		}
		table[h.Key] = h.Value
	}
	if m.Key != "" {
		table[KeyHeader] = m.Key
	}
	if n := len(table); n > AMQPMaxTableEntries {
		why = append(why, fmt.Sprintf("amqp: %d headers, over the %d a consumer on amqp091-go reads", n, AMQPMaxTableEntries))
	}
	if len(table) > 0 {
		size += 4
		for k, v := range table {
			size += 1 + len(k) + 1 + 4 + len(v)
		}
	}
	if size > frameMax {
		why = append(why, fmt.Sprintf("amqp: properties and headers of %d bytes, over the frame size of %d bytes (they travel in one frame)", size, frameMax))
	}
	return why
}

// natsHeaderForbidden are the printable ASCII characters nats.go refuses
// in a header name (ErrBadHeaderMsg), beside spaces and control
// characters: its rule, ADR-4's printable ASCII without ':', a little
// stricter.
const natsHeaderForbidden = `"()/,:;<=>?@[\]{}`

// natsHeaderName reports whether nats.go sends a header of this name.
func natsHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 33 || c > 126 || strings.IndexByte(natsHeaderForbidden, c) >= 0 {
			return false
		}
	}
	return true
}

// NATSEncodable returns why nats.go cannot send m as it is, a reason per
// header: a name it refuses (the whole publication fails), or a value it
// would change (it replaces a line break with a space and trims white
// space off the ends), the event id, type and key included, which travel
// as headers.
func NATSEncodable(m Message) []string {
	var why []string
	check := func(k, v string) {
		if !natsHeaderName(k) {
			why = append(why, fmt.Sprintf("nats: header name %.60q is not printable ASCII without spaces and %s", k, natsHeaderForbidden))
			return
		}
		if strings.ContainsAny(v, "\r\n") || textproto.TrimString(v) != v {
			why = append(why, fmt.Sprintf("nats: header %s: its value %.60q has a line break or white space at an end, which NATS headers do not keep", k, v))
		}
	}
	for _, h := range m.Headers {
		check(h.Key, h.Value)
	}
	if m.Key != "" {
		check(KeyHeader, m.Key)
	}
	return why
}
