package amqp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
)

// amqpFrame encodes one frame.
func amqpFrame(typ byte, channel uint16, payload []byte) []byte {
	f := []byte{typ, byte(channel >> 8), byte(channel)}
	f = binary.BigEndian.AppendUint32(f, uint32(len(payload)))
	return append(append(f, payload...), amqpFrameEnd)
}

func shortstr(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// amqpDeliverFrame is basic.deliver of consumer's delivery tag.
func amqpDeliverFrame(channel uint16, consumer string, tag uint64) []byte {
	p := []byte{0, amqpBasicClass, 0, amqpBasicDeliver}
	p = append(p, shortstr(consumer)...)
	p = binary.BigEndian.AppendUint64(p, tag)
	p = append(p, 0) // redelivered
	p = append(p, shortstr("")...)
	p = append(p, shortstr("rk")...)
	return amqpFrame(amqpFrameMethod, channel, p)
}

// amqpHeaderFrame is a content header of a body of bodySize bytes with
// the message-id property and, when table is not nil, a headers table of
// those bytes.
func amqpHeaderFrame(channel uint16, table []byte, bodySize uint64) []byte {
	p := []byte{0, amqpBasicClass, 0, 0}
	p = binary.BigEndian.AppendUint64(p, bodySize)
	flags := uint16(0x0080) // message-id
	if table != nil {
		flags |= amqpFlagHeaders
	}
	p = binary.BigEndian.AppendUint16(p, flags)
	if table != nil {
		p = binary.BigEndian.AppendUint32(p, uint32(len(table)))
		p = append(p, table...)
	}
	p = append(p, shortstr("m-1")...)
	return amqpFrame(amqpFrameHeader, channel, p)
}

// readThrough reads stream through amqpFrames in reads of n bytes, as the
// client's bufio.Reader does.
func readThrough(t testing.TB, stream []byte, n int) ([]byte, *amqpFrames) {
	t.Helper()
	client, server := net.Pipe()
	go func() {
		_, _ = server.Write(stream)
		_ = server.Close()
	}()
	f := newAMQPFrames(client)
	defer f.Close()
	var out bytes.Buffer
	buf := make([]byte, n)
	for {
		k, err := f.Read(buf)
		out.Write(buf[:k])
		if err == io.EOF {
			return out.Bytes(), f
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// amqpFrames passes frames through byte for byte, in reads of any size,
// and takes out of a content header only the headers table the client
// refuses (here a value of a type it does not know, which amqp091-go
// cannot publish), keeping the other properties and noting why for the
// delivery it belongs to.
func TestAMQPFramesTakeOutOnlyTheUnreadableTable(t *testing.T) {
	t.Parallel()
	good := append(shortstr("k"), 'S', 0, 0, 0, 1, 'v')
	bad := append(shortstr("k"), 'Z')
	var stream []byte
	stream = append(stream, amqpDeliverFrame(1, "inboxd-q", 7)...)
	stream = append(stream, amqpHeaderFrame(1, good, 3)...)
	stream = append(stream, amqpFrame(3, 1, []byte("abc"))...)
	stream = append(stream, amqpFrame(8, 0, nil)...) // a heartbeat
	stream = append(stream, amqpDeliverFrame(1, "inboxd-q", 8)...)
	badHeader := amqpHeaderFrame(1, bad, 3)
	stream = append(stream, badHeader...)
	stream = append(stream, amqpFrame(3, 1, []byte("def"))...)
	for _, n := range []int{1, 7, 4096} {
		out, f := readThrough(t, stream, n)
		i := bytes.Index(stream, badHeader)
		want := slices.Concat(stream[:i], amqpHeaderFrame(1, nil, 3), stream[i+len(badHeader):])
		if !bytes.Equal(out, want) {
			t.Errorf("reads of %d: got\n%x\nwant\n%x", n, out, want)
		}
		if _, ok := f.take("inboxd-q", 7); ok {
			t.Errorf("reads of %d: the readable delivery noted", n)
		}
		u, ok := f.take("inboxd-q", 8)
		if !ok || !strings.Contains(u.Why, "unknown type 'Z'") || u.Size != len(bad) || len(u.Digest) != 32 {
			t.Errorf("reads of %d: noted %+v %v", n, u, ok)
		}
	}
}

// The digest of a table does not depend on the redelivery headers in it,
// nor on where RabbitMQ put them.
func TestAMQPTableDigestIgnoresRedeliveryHeaders(t *testing.T) {
	t.Parallel()
	entry := func(name, value string) []byte {
		return append(append(shortstr(name), 'S', 0, 0, 0, byte(len(value))), value...)
	}
	base := slices.Concat(entry("a", "1"), entry("b", "2"))
	redelivered := slices.Concat(entry("x-delivery-count", "1"), entry("b", "2"), entry("a", "1"))
	other := slices.Concat(entry("a", "1"), entry("b", "3"))
	if !bytes.Equal(tableDigest(base), tableDigest(redelivered)) {
		t.Error("a redelivery changes the digest")
	}
	if bytes.Equal(tableDigest(base), tableDigest(other)) {
		t.Error("two tables, one digest")
	}
}

// BenchmarkAMQPFrames reads deliveries (basic.deliver, a content header
// with a small table, a 90-byte body) through amqpFrames, as the client
// reads them: its cost per message.
func BenchmarkAMQPFrames(b *testing.B) {
	table := slices.Concat(shortstr("event_type"), []byte{'S', 0, 0, 0, 13}, []byte("order.created"))
	body := bytes.Repeat([]byte("x"), 90)
	var one []byte
	one = append(one, amqpDeliverFrame(1, "inboxd-orders", 1)...)
	one = append(one, amqpHeaderFrame(1, table, uint64(len(body)))...)
	one = append(one, amqpFrame(3, 1, body)...)
	stream := bytes.Repeat(one, 1000)
	for _, through := range []bool{false, true} {
		name := "raw"
		if through {
			name = "through"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(one)))
			for b.Loop() {
				var r io.Reader = struct{ io.Reader }{bytes.NewReader(stream)} // no WriteTo: read as the client reads
				if through {
					r = newAMQPFrames(readerConn{r: r})
				}
				br := bufio.NewReader(r)
				if _, err := io.Copy(io.Discard, br); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/message")
		})
	}
}

// readerConn is an io.Reader as a net.Conn, for the benchmark.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// A content header that a redelivery's headers took over the
// connection's frame_max (which the client refuses too) is passed on
// without its table; one whose properties cannot be read at all, without
// any property.
func TestAMQPFramesOverFrameMaxAndBrokenProperties(t *testing.T) {
	t.Parallel()
	tune := []byte{0, amqpConnectionClass, 0, amqpConnectionTune, 0, 0}
	tune = binary.BigEndian.AppendUint32(tune, 4096)
	tune = append(tune, 0, 10)
	big := append(shortstr("x-delivery-count"), 'l', 0, 0, 0, 0, 0, 0, 0, 1)
	big = append(append(big, shortstr("pad")...), 'S', 0, 0, 0x10, 0)
	big = append(big, bytes.Repeat([]byte("p"), 0x1000)...)
	bigHeader := amqpHeaderFrame(1, big, 1)
	broken := amqpHeaderFrame(1, nil, 1)
	broken = slices.Concat(broken[:7+12], []byte{0x00, 0x80}, []byte{200, 'm'}, broken[len(broken)-1:]) // message-id runs past the frame
	binary.BigEndian.PutUint32(broken[3:7], uint32(len(broken)-8))
	stream := slices.Concat(amqpFrame(amqpFrameMethod, 0, tune),
		amqpDeliverFrame(1, "c", 1), bigHeader, amqpFrame(3, 1, []byte("a")),
		amqpDeliverFrame(1, "c", 2), broken, amqpFrame(3, 1, []byte("b")))
	out, f := readThrough(t, stream, 4096)
	noProperties := amqpFrame(amqpFrameHeader, 1, slices.Concat(broken[7:7+12], []byte{0, 0}))
	want := slices.Concat(amqpFrame(amqpFrameMethod, 0, tune),
		amqpDeliverFrame(1, "c", 1), amqpHeaderFrame(1, nil, 1), amqpFrame(3, 1, []byte("a")),
		amqpDeliverFrame(1, "c", 2), noProperties, amqpFrame(3, 1, []byte("b")))
	if !bytes.Equal(out, want) {
		t.Errorf("got\n%x\nwant\n%x", out, want)
	}
	if u, ok := f.take("c", 1); !ok || !strings.Contains(u.Why, "over the connection's frame_max of 4096") {
		t.Errorf("over frame_max: noted %q %v", u.Why, ok)
	}
	if u, ok := f.take("c", 2); !ok || u.Why != "the message's properties cannot be read" {
		t.Errorf("broken properties: noted %q %v", u.Why, ok)
	}
}

// amqp091-go counts a table's distinct names (it reads into a map): a
// repeated name does not count twice against its limit.
func TestAMQPTableLimitCountsDistinctNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		entries int
		repeat  bool
		refused bool
	}{{8192, false, false}, {8193, false, true}, {8193, true, false}, {8194, true, true}} {
		var entries []byte
		for i := range c.entries {
			name := fmt.Sprintf("h%d", i)
			if c.repeat && i == 1 {
				name = "h0"
			}
			entries = append(append(entries, shortstr(name)...), 'V')
		}
		cur := amqpCursor{b: slices.Concat(binary.BigEndian.AppendUint32(nil, uint32(len(entries))), entries)}
		why, _, err := checkAMQPTable(&cur)
		if (err != nil) != c.refused {
			t.Errorf("%d entries, a name repeated %v: refused %v (%s), want %v", c.entries, c.repeat, err != nil, why, c.refused)
		}
	}
}
