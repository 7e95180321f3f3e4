package amqp

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/amqpmap"
)

// RabbitMQ accepts, and delivers, a headers table that amqp091-go refuses
// to read: more than 8,192 entries in one table or array, tables or arrays
// nested more than 32 deep, a field of a type it does not know. The client
// then closes the whole connection ("invalid field or value inside of a
// frame"), the message goes back to the head of its queue, and comes
// again on the next connection: one message stalls its queue for ever.
// amqpFrames stands between the connection and the client and reads the
// server's frames first: it passes them through unchanged, except a
// content header whose headers table the client would refuse, which it
// passes on without that table (or, if the rest of its properties cannot be
// read either, without any property), noting why for the delivery it
// belongs to. The source then stores that delivery as a rejected row that
// says why (amqpFrames.take), and acknowledges it like any other.
//
// The limits are amqp091-go v1.16.0's (read.go: maxFieldDepth,
// maxContainerElements, readFieldDepth's types), and the checks follow its
// reading step by step; TestAMQPHeaderChecksMatchTheClient holds the two
// together on the edges of each limit.
const (
	// amqpMaxFieldDepth is how deep the client reads nested tables and
	// arrays (the headers table itself is depth 0).
	amqpMaxFieldDepth = 32
	// amqpMaxContainerElements is how many entries the client reads in one
	// table (distinct names) or array.
	amqpMaxContainerElements = 8192
	// amqpMaxHeaderFrame is the largest content-header frame checked: a
	// bigger one (far above RabbitMQ's default frame_max of 128 KiB) is
	// passed through unchecked rather than held in memory.
	amqpMaxHeaderFrame = 1 << 20
)

// AMQP 0-9-1 frame types and the property flags that come before the
// headers table.
const (
	amqpFrameMethod      = 1
	amqpFrameHeader      = 2
	amqpFrameEnd         = 0xCE
	amqpFlagHeaders      = 0x2000
	amqpBasicClass       = 60
	amqpBasicDeliver     = 60
	amqpConnectionClass  = 10
	amqpConnectionTune   = 30
	amqpFrameMinSize     = 4096 // the smallest frame_max amqp091-go negotiates
	amqpHeaderFixedBytes = 14   // class, weight, body size, property flags
)

// amqpDeliveryKey names one delivery on a connection: its consumer tag
// (one per queue) and its delivery tag.
type amqpDeliveryKey struct {
	consumer string
	tag      uint64
}

// amqpFrames is a net.Conn whose reads are the server's frames with every
// content header made readable by amqp091-go (see above). Create it with
// newAMQPFrames before the AMQP handshake. Read is called by one goroutine
// (the client's reader); take by any.
type amqpFrames struct {
	net.Conn
	r *bufio.Reader

	buf     []byte // the frame read whole, reused
	out     []byte // bytes read and checked, not yet returned by Read
	pass    int    // bytes of the current frame to pass through as they come
	raw     bool   // the server answered with a protocol header: pass everything
	started bool
	last    map[uint16]amqpDeliveryKey // per channel: the delivery whose content comes next
	// frameMax is the connection's frame_max as the client negotiates it
	// (the server's: the client asks for none), 0 for no limit: the
	// client refuses a frame whose payload exceeds frameMax - 8.
	frameMax int

	noted      atomic.Int32 // entries in unreadable
	mu         sync.Mutex
	unreadable map[amqpDeliveryKey]amqpmap.Unreadable
}

func newAMQPFrames(c net.Conn) *amqpFrames {
	return &amqpFrames{Conn: c, r: bufio.NewReaderSize(c, 32<<10),
		last: map[uint16]amqpDeliveryKey{}, unreadable: map[amqpDeliveryKey]amqpmap.Unreadable{}}
}

// take returns, and forgets, what was noted about the delivery of
// consumer with tag: ok is false for a delivery passed on unchanged.
func (f *amqpFrames) take(consumer string, tag uint64) (amqpmap.Unreadable, bool) {
	if f == nil || f.noted.Load() == 0 {
		return amqpmap.Unreadable{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := amqpDeliveryKey{consumer, tag}
	u, ok := f.unreadable[key]
	if ok {
		delete(f.unreadable, key)
		f.noted.Add(-1)
	}
	return u, ok
}

// note records u for the delivery whose content comes next on channel.
func (f *amqpFrames) note(channel uint16, u amqpmap.Unreadable) {
	key, ok := f.last[channel]
	if !ok {
		return // not a delivery's content (basic.return, basic.get-ok)
	}
	delete(f.last, channel)
	f.mu.Lock()
	if _, dup := f.unreadable[key]; !dup {
		f.noted.Add(1)
	}
	f.unreadable[key] = u
	f.mu.Unlock()
}

// Read returns the server's bytes, frames checked (see amqpFrames). It
// fills p with as many frames as have arrived, and waits only for the
// first.
func (f *amqpFrames) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		switch {
		case len(f.out) > 0:
			k := copy(p[n:], f.out)
			f.out = f.out[k:]
			n += k
		case f.pass > 0 || f.raw:
			if n > 0 && f.r.Buffered() == 0 {
				return n, nil
			}
			q := p[n:]
			if !f.raw {
				q = q[:min(len(q), f.pass)]
			}
			k, err := f.r.Read(q)
			f.pass -= k
			n += k
			if err != nil {
				return n, err
			}
		default:
			if n > 0 && !f.frameBuffered() {
				return n, nil // the next frame must not be waited for
			}
			if err := f.nextFrame(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// frameBuffered reports whether the next frame has arrived whole, so that
// nextFrame reads it without waiting.
func (f *amqpFrames) frameBuffered() bool {
	if f.r.Buffered() < 7 {
		return false
	}
	head, _ := f.r.Peek(7)
	return f.r.Buffered() >= 8+int(binary.BigEndian.Uint32(head[3:7]))
}

// nextFrame reads the head of the next frame: what must be checked (a
// content header, a basic.deliver) whole into out, the head of the others,
// their remainder left to pass through.
func (f *amqpFrames) nextFrame() error {
	if !f.started {
		f.started = true
		if b, err := f.r.Peek(4); err == nil && string(b) == "AMQP" {
			// The server refuses the protocol version: the client reads
			// the header it answers with, then the connection closes.
			f.raw = true
			return nil
		}
	}
	f.buf = f.buf[:0]
	head, err := f.read(7)
	if err != nil {
		return err
	}
	typ, channel, size := head[0], binary.BigEndian.Uint16(head[1:3]), binary.BigEndian.Uint32(head[3:7])
	switch {
	case typ == amqpFrameHeader && size <= amqpMaxHeaderFrame:
		frame, err := f.read(8 + int(size))
		if err != nil {
			return err
		}
		f.out = f.checkHeader(channel, frame)
	case typ == amqpFrameMethod && size >= 4 && size <= amqpMaxHeaderFrame:
		frame, err := f.read(11)
		if err != nil {
			return err
		}
		class, method := binary.BigEndian.Uint16(frame[7:9]), binary.BigEndian.Uint16(frame[9:11])
		if channel == 0 && class == amqpConnectionClass && method == amqpConnectionTune {
			if frame, err = f.read(8 + int(size)); err != nil {
				return err
			}
			if args := frame[11 : len(frame)-1]; len(args) >= 6 {
				f.frameMax = int(binary.BigEndian.Uint32(args[2:6]))
				if f.frameMax > 0 && f.frameMax < amqpFrameMinSize {
					f.frameMax = amqpFrameMinSize
				}
			}
			f.out = frame
			return nil
		}
		if class != amqpBasicClass || method != amqpBasicDeliver {
			if len(f.last) > 0 {
				delete(f.last, channel) // a content that follows is not a delivery's
			}
			f.out, f.pass = frame, int(size)+1-4
			return nil
		}
		if frame, err = f.read(8 + int(size)); err != nil {
			return err
		}
		f.noteDeliver(channel, frame[11:len(frame)-1])
		f.out = frame
	default:
		f.out, f.pass = head, int(size)+1
	}
	return nil
}

// read reads the current frame on until f.buf holds its first n bytes,
// and returns them.
func (f *amqpFrames) read(n int) ([]byte, error) {
	had := len(f.buf)
	if cap(f.buf) < n {
		f.buf = append(make([]byte, 0, max(n, 256)), f.buf...)
	}
	f.buf = f.buf[:n]
	if _, err := io.ReadFull(f.r, f.buf[had:]); err != nil {
		return nil, err
	}
	return f.buf, nil
}

// noteDeliver records the consumer and delivery tags of a basic.deliver's
// arguments: its content header comes next on the channel.
func (f *amqpFrames) noteDeliver(channel uint16, args []byte) {
	key, ok := amqpDeliverKey(args, f.last[channel].consumer)
	if ok {
		f.last[channel] = key
	} else {
		delete(f.last, channel)
	}
}

// amqpDeliverKey reads basic.deliver's consumer tag and delivery tag;
// prev, the channel's previous consumer tag, is reused when it is the same.
func amqpDeliverKey(args []byte, prev string) (amqpDeliveryKey, bool) {
	if len(args) < 1 || len(args) < 1+int(args[0])+8 {
		return amqpDeliveryKey{}, false
	}
	n := int(args[0])
	consumer := prev
	if string(args[1:1+n]) != prev {
		consumer = string(args[1 : 1+n])
	}
	return amqpDeliveryKey{consumer: consumer, tag: binary.BigEndian.Uint64(args[1+n:])}, true
}

// amqpProperty is one of basic's content properties, in the order they
// follow the property flags: its flag and how it is encoded.
type amqpProperty struct {
	flag uint16
	size int // bytes of a fixed-size property; 0: a short string; -1: a table
}

// amqpProperties are basic's content properties: content-type,
// content-encoding, headers, delivery-mode, priority, correlation-id,
// reply-to, expiration, message-id, timestamp, type, user-id, app-id and
// the reserved one (amqp091-go's parseHeaderFrame).
var amqpProperties = []amqpProperty{
	{0x8000, 0}, {0x4000, 0}, {amqpFlagHeaders, -1}, {0x1000, 1}, {0x0800, 1}, {0x0400, 0}, {0x0200, 0},
	{0x0100, 0}, {0x0080, 0}, {0x0040, 8}, {0x0020, 0}, {0x0010, 0}, {0x0008, 0}, {0x0004, 0},
}

// checkHeader returns the content-header frame as the client may read
// it: unchanged, or without its headers table (the reason noted for the
// channel's delivery), or, when its other properties cannot be read
// either, without any property.
func (f *amqpFrames) checkHeader(channel uint16, frame []byte) []byte {
	payload := frame[7 : len(frame)-1]
	if len(payload) < amqpHeaderFixedBytes || frame[len(frame)-1] != amqpFrameEnd {
		return frame // not a frame the client reads at all: it says so itself
	}
	flags := binary.BigEndian.Uint16(payload[12:14])
	props := payload[amqpHeaderFixedBytes:]
	c := amqpCursor{b: props}
	var (
		u                 amqpmap.Unreadable
		tableAt, tableEnd = -1, -1 // the table's bytes in props, length included
		refused, broken   bool     // the client refuses the table; or a property
	)
	for _, p := range amqpProperties {
		if flags&p.flag == 0 {
			continue
		}
		var err error
		switch p.size {
		case 0:
			_, err = c.shortstr()
		case -1:
			tableAt = len(props) - len(c.b)
			var why string
			if why, u.Size, err = checkAMQPTable(&c); err != nil && why != "" {
				// The table is refused but its extent is known: it can
				// be taken out, and the properties after it read.
				u.Why, refused, err = why, true, nil
			}
			tableEnd = tableAt + 4 + u.Size
		default:
			_, err = c.bytes(p.size)
		}
		if err != nil {
			broken = true
			break
		}
	}
	// The client also refuses a frame over the connection's frame_max:
	// a redelivery's headers (x-delivery-count, x-death) can take one
	// there.
	tooLarge := func(frameBytes int) bool { return f.frameMax > 0 && frameBytes > f.frameMax }
	overMax := fmt.Sprintf("a content header of %d bytes, over the connection's frame_max of %d", len(payload), f.frameMax)
	switch {
	case broken:
		u.Why = "the message's properties cannot be read"
	case !refused && !tooLarge(len(frame)):
		return frame
	case !refused && tableAt >= 0:
		u.Why, refused = overMax, true
	case !refused:
		u.Why, broken = overMax, true
	}
	if refused && !broken && tooLarge(len(frame)-(tableEnd-tableAt)) {
		u.Why, broken = overMax, true // too large even without the table
	}
	var out []byte
	if broken {
		u.Size = len(props)
		u.Digest = tableDigest(props)
		out = slices.Concat(frame[:7+12], []byte{0, 0}, frame[len(frame)-1:])
	} else {
		u.Digest = tableDigest(props[tableAt+4 : tableEnd])
		var flagsOut [2]byte
		binary.BigEndian.PutUint16(flagsOut[:], flags&^amqpFlagHeaders)
		out = slices.Concat(frame[:7+12], flagsOut[:], props[:tableAt], props[tableEnd:], frame[len(frame)-1:])
	}
	binary.BigEndian.PutUint32(out[3:7], uint32(len(out)-8))
	f.note(channel, u)
	return out
}

// tableDigest is a SHA-256 over the entries of a headers table's bytes
// (as far as they can be split into names and values), in the order of
// their names, less those a broker adds on a redelivery: RabbitMQ may
// insert x-delivery-count anywhere in a table it re-encodes, and the
// digest of one message must not change with it. Bytes that cannot be
// split are hashed as they are.
func tableDigest(table []byte) []byte {
	type entry struct{ name, value []byte }
	var entries []entry
	c := amqpCursor{b: table}
	for len(c.b) > 0 {
		name, err := c.shortstr()
		if err != nil {
			break
		}
		before := c.b
		if err := c.skipValue(); err != nil {
			c.b = before
			break
		}
		if !ingestcore.RedeliveryHeader(string(name)) {
			entries = append(entries, entry{name, before[:len(before)-len(c.b)]})
		}
	}
	slices.SortStableFunc(entries, func(a, b entry) int { return slices.Compare(a.name, b.name) })
	h := sha256.New()
	for _, e := range entries {
		ingestcore.WriteField(h, e.name)
		ingestcore.WriteField(h, e.value)
	}
	ingestcore.WriteField(h, c.b)
	return h.Sum(nil)
}

// errAMQPTable is a headers table the client refuses.
var errAMQPTable = errors.New("unreadable headers table")

// checkAMQPTable reads a headers table (its long-string length, then its
// entries) as amqp091-go does, and says why the client would refuse it:
// why is "" when the table's length runs past the frame, size the table's
// bytes. err is nil for a table the client reads.
func checkAMQPTable(c *amqpCursor) (why string, size int, err error) {
	b, err := c.longstr()
	if err != nil {
		return "", 0, errAMQPTable
	}
	v := amqpTableCheck{}
	if err := v.table(&amqpCursor{b: b}, 0); err != nil {
		if v.why == "" {
			v.why = "a malformed table"
		}
		return v.why, len(b), errAMQPTable
	}
	return "", len(b), nil
}

// amqpTableCheck follows amqp091-go's readTableDepth, readArrayDepth and
// readFieldDepth, keeping their distinction between io.EOF (an array ends
// there) and other errors, and notes in why the first limit broken.
type amqpTableCheck struct{ why string }

func (v *amqpTableCheck) fail(format string, args ...any) error {
	if v.why == "" {
		v.why = fmt.Sprintf(format, args...)
	}
	return errAMQPTable
}

// table checks a table's bytes at depth (readTableDepth after its
// readLongstr).
func (v *amqpTableCheck) table(c *amqpCursor, depth int) error {
	if depth > amqpMaxFieldDepth {
		return v.fail("tables nested more than the %d levels amqp091-go reads", amqpMaxFieldDepth)
	}
	var names map[string]struct{}
	entries := 0
	start := c.b
	for len(c.b) > 0 {
		name, err := c.shortstr()
		if err != nil {
			return err
		}
		if err := v.field(c, depth); err != nil {
			return err
		}
		// The client counts distinct names (a map), after reading the
		// value; count them only past the limit, where it matters.
		if entries == amqpMaxContainerElements {
			names = amqpTableNames(start, entries)
		}
		if len(names) >= amqpMaxContainerElements {
			total := entries + 1
			for len(c.b) > 0 && c.shortstrSkip() == nil && c.skipValue() == nil {
				total++
			}
			return v.fail("a table of %d entries, more than the %d amqp091-go reads", total, amqpMaxContainerElements)
		}
		if names != nil {
			names[string(name)] = struct{}{}
		}
		entries++
	}
	return nil
}

// amqpTableNames is the set of the names of a table's first n entries,
// which have been read once already.
func amqpTableNames(b []byte, n int) map[string]struct{} {
	names := make(map[string]struct{}, n)
	c := amqpCursor{b: b}
	for range n {
		name, _ := c.shortstr()
		_ = c.skipValue()
		names[string(name)] = struct{}{}
	}
	return names
}

// array checks an array's elements at depth (readArrayDepth).
func (v *amqpTableCheck) array(c *amqpCursor, depth int) error {
	if depth > amqpMaxFieldDepth {
		return v.fail("tables nested more than the %d levels amqp091-go reads", amqpMaxFieldDepth)
	}
	size, err := c.uint32()
	if err != nil {
		return err
	}
	if size > math.MaxInt32 {
		return v.fail("an array of %d bytes", size)
	}
	// A limited reader over the rest: the elements read end the array at
	// io.EOF, whatever the size said.
	lim := amqpCursor{b: c.b[:min(len(c.b), int(size))]}
	n := len(lim.b)
	defer func() { c.b = c.b[n-len(lim.b):] }()
	elements := 0
	for {
		if err := v.field(&lim, depth); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if elements >= amqpMaxContainerElements {
			total := elements + 1
			for len(lim.b) > 0 && lim.skipValue() == nil {
				total++
			}
			return v.fail("an array of %d elements, more than the %d amqp091-go reads", total, amqpMaxContainerElements)
		}
		elements++
	}
}

// field checks one value (readFieldDepth).
func (v *amqpTableCheck) field(c *amqpCursor, depth int) error {
	typ, err := c.byte()
	if err != nil {
		return err
	}
	return v.value(c, typ, depth)
}

// value checks the value of a field of type typ.
func (v *amqpTableCheck) value(c *amqpCursor, typ byte, depth int) error {
	switch typ {
	case 't', 'B', 'b':
		return c.skip(1)
	case 's', 'u':
		return c.skip(2)
	case 'I', 'i', 'f':
		return c.skip(4)
	case 'l', 'd', 'T':
		return c.skip(8)
	case 'D':
		if err := c.skip(1); err != nil {
			return err
		}
		return c.skip(4)
	case 'S':
		n, err := c.uint32()
		if err != nil {
			return err
		}
		if n > math.MaxInt32 {
			return v.fail("a string of %d bytes", n)
		}
		return c.skip(int(n))
	case 'x':
		n, err := c.uint32()
		if err != nil {
			return err
		}
		if int32(n) < 0 {
			return v.fail("a byte array of negative length")
		}
		return c.skip(int(n))
	case 'A':
		return v.array(c, depth+1)
	case 'F':
		// readTableDepth checks the depth before it reads the table.
		if depth+1 > amqpMaxFieldDepth {
			return v.fail("tables nested more than the %d levels amqp091-go reads", amqpMaxFieldDepth)
		}
		b, err := c.longstr()
		if err != nil {
			return err
		}
		return v.table(&amqpCursor{b: b}, depth+1)
	case 'V':
		return nil
	default:
		return v.fail("a value of unknown type %q", typ)
	}
}

// amqpCursor reads AMQP's encodings from b with io.ReadFull's errors:
// io.EOF when nothing is left, io.ErrUnexpectedEOF when part of a value is.
type amqpCursor struct{ b []byte }

func (c *amqpCursor) skip(n int) error {
	switch {
	case n == 0:
		return nil
	case len(c.b) == 0:
		return io.EOF
	case len(c.b) < n:
		c.b = c.b[len(c.b):]
		return io.ErrUnexpectedEOF
	}
	c.b = c.b[n:]
	return nil
}

func (c *amqpCursor) bytes(n int) ([]byte, error) {
	b := c.b
	if err := c.skip(n); err != nil {
		return nil, err
	}
	return b[:n], nil
}

func (c *amqpCursor) byte() (byte, error) {
	b, err := c.bytes(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (c *amqpCursor) uint32() (uint32, error) {
	b, err := c.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(b), nil
}

func (c *amqpCursor) shortstr() ([]byte, error) {
	n, err := c.byte()
	if err != nil {
		return nil, err
	}
	return c.bytes(int(n))
}

func (c *amqpCursor) shortstrSkip() error {
	_, err := c.shortstr()
	return err
}

func (c *amqpCursor) longstr() ([]byte, error) {
	n, err := c.uint32()
	if err != nil {
		return nil, err
	}
	if n > math.MaxInt32 {
		return nil, errAMQPTable
	}
	return c.bytes(int(n))
}

// skipValue passes over one value without checking its limits.
func (c *amqpCursor) skipValue() error {
	v := amqpTableCheck{}
	deep := amqpCursor{b: c.b}
	err := v.fieldUnbounded(&deep)
	c.b = deep.b
	return err
}

// fieldUnbounded passes over one value of any depth and size.
func (v *amqpTableCheck) fieldUnbounded(c *amqpCursor) error {
	typ, err := c.byte()
	if err != nil {
		return err
	}
	switch typ {
	case 'A':
		b, err := c.longstr()
		if err != nil {
			return err
		}
		inner := amqpCursor{b: b}
		for len(inner.b) > 0 {
			if err := v.fieldUnbounded(&inner); err != nil {
				return err
			}
		}
		return nil
	case 'F', 'S':
		_, err := c.longstr()
		return err
	case 'x':
		n, err := c.uint32()
		if err != nil {
			return err
		}
		return c.skip(int(int32(n) & math.MaxInt32))
	}
	// The fixed-size types, and V; an unknown type ends the walk.
	return v.value(c, typ, 0)
}
