package nats

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/natsmap"
	"github.com/inboxd/inboxd/internal/netfault"
	"github.com/inboxd/inboxd/internal/testkit"
)

// statusMsg is a message shaped like a NATS control message: no payload,
// a header named Status (and a Description, if any), which nats.go's Fetch
// takes for one of the server's own.
func statusMsg(subject, code, description string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set("Status", code)
	if description != "" {
		m.Header.Set("Description", description)
	}
	return m
}

// A stored message that looks like a control message (empty, a Status
// header) is a message like any other: issue 25 saw nats.go's Fetch skip
// a "Status: 100" one without storing nor acknowledging it, and end the
// pull at a "Status: 400" one, dropping the messages after it in that
// pull, round after round (so would "Status: 408", "Status: 409" with
// "Description: Consumer Deleted" and "Status: 503"). Every message of the stream
// becomes a row, the look-alikes received ones (they are well-formed: an empty payload, an id
// and a type by the usual rules), and the consumer ends with nothing
// pending nor waiting for its ack, over several AckWaits.
func TestNATSStatusHeaderMessagesAreRows(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	msgs := []*nats.Msg{
		natsEvent("x", "e-1", "t", "1"),
		natsEvent("x", "e-2", "t", "2"),
		statusMsg("x", "100", ""),
		natsEvent("x", "e-3", "t", "3"),
		statusMsg("x", "400", ""),
		natsEvent("x", "e-4", "t", "4"),
		statusMsg("x", "409", "Consumer Deleted"),
		natsEvent("x", "e-5", "t", "5"),
		statusMsg("x", "408", "Request Timeout"),
		statusMsg("x", "503", ""),
	}
	b.publish(t, msgs...)

	cfg := b.config()
	cfg.AckWait = 2 * time.Second // a message left unacknowledged comes back, round after round
	cfg.Pipeline.WriteTimeout = time.Second
	s, stop := b.start(t, cfg)
	waitFor(t, 30*time.Second, func() (bool, string) {
		rows := readRows(t, b.db)
		info := b.consumerInfo(t, DefaultConsumer)
		return len(rows) == len(msgs) && info.NumPending == 0 && info.NumAckPending == 0,
			fmt.Sprintf("%d rows of %d, %d pending, %d waiting for their ack (%d redelivered)",
				len(rows), len(msgs), info.NumPending, info.NumAckPending, info.NumRedelivered)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rows := readRows(t, b.db)
	for i := 1; i <= 5; i++ {
		if r, ok := rows[fmt.Sprintf("%s e-%d", b.stream, i)]; !ok || r.Status != ingestcore.StatusReceived {
			t.Errorf("e-%d: %+v, present %v", i, r, ok)
		}
	}
	codes := map[string]bool{}
	for _, r := range rows {
		code, ok := r.Headers["Status"]
		if !ok {
			continue
		}
		codes[fmt.Sprint(code)] = true
		if r.Status != ingestcore.StatusReceived || len(r.Payload) != 0 || r.EventType != b.stream+".x" ||
			!strings.HasPrefix(r.EventID, b.stream+"/") {
			t.Errorf("a Status %s message: %+v", code, r)
		}
	}
	if len(codes) != 5 || !codes["100"] || !codes["400"] || !codes["408"] || !codes["409"] || !codes["503"] {
		t.Errorf("rows of the Status messages: %v, want 100, 400, 408, 409 and 503", codes)
	}
	if got := testutil.ToFloat64(s.Metrics.FetchErrors); got != 0 {
		t.Errorf("fetch errors = %v: a stored message is no pull error", got)
	}
}

// createStream creates the bundle's stream as setupNATS made it.
func (b *natsBundle) createStream(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: b.stream, Subjects: []string{b.stream + ".>"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
}

// idless returns n messages without an id, their payloads "<tag>-<i>".
func idless(tag string, n int) []*nats.Msg {
	var msgs []*nats.Msg
	for i := range n {
		m := nats.NewMsg("x")
		m.Header.Set("event_type", "t")
		m.Data = []byte(fmt.Sprintf("%s-%d", tag, i))
		msgs = append(msgs, m)
	}
	return msgs
}

// A stream deleted and created again under its name numbers its messages
// from 1 again: issue 25 saw 3 of 5 new messages without ids taken for the
// old stream's, acknowledged and dropped (duplicates_total 3). The
// fallback id tells the two streams' messages apart: every new message is
// stored, none counted a duplicate.
func TestNATSRecreatedStreamKeepsMessagesWithoutIDs(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	s, _ := b.start(t, b.config())
	const n = 5
	b.publish(t, idless("old", n)...)
	waitFor(t, 20*time.Second, func() (bool, string) {
		got := len(readRows(t, b.db))
		return got == n, fmt.Sprintf("%d rows, want %d", got, n)
	})
	b.drained(t, DefaultConsumer)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.js.DeleteStream(ctx, b.stream); err != nil {
		t.Fatal(err)
	}
	b.createStream(t)
	waitFor(t, 30*time.Second, func() (bool, string) {
		return testutil.ToFloat64(s.Metrics.Reconnects) >= 1 && s.Ready(), "bound to the new stream, ready"
	})
	b.publish(t, idless("new", n)...)
	waitFor(t, 30*time.Second, func() (bool, string) {
		got := len(readRows(t, b.db))
		return got == 2*n, fmt.Sprintf("%d rows, want %d (%v duplicates)", got, 2*n, testutil.ToFloat64(s.Metrics.Duplicates))
	})
	b.drained(t, DefaultConsumer)
	payloads := map[string]bool{}
	for _, r := range readRows(t, b.db) {
		payloads[string(r.Payload)] = true
	}
	for i := range n {
		for _, tag := range []string{"old", "new"} {
			if p := fmt.Sprintf("%s-%d", tag, i); !payloads[p] {
				t.Errorf("no row for %s", p)
			}
		}
	}
	if got := testutil.ToFloat64(s.Metrics.Duplicates); got != 0 {
		t.Errorf("duplicates = %v, want 0", got)
	}
}

// A NATS reject reason names the places the mapping looked at, in the
// order it looked (issue 27): Nats-Msg-Id, the id headers, the JSON field,
// the stream position; the type headers, the JSON field, the subject. The
// list follows the configuration, as the walk does.
func TestMapNATSRejectReasonsNameThePlacesInOrder(t *testing.T) {
	t.Parallel()
	long := "s." + strings.Repeat("o", ingest.MaxIdentifierBytes)
	tests := []struct {
		name string
		msg  fakeNATSMsg
		opts ingest.MapOptions
		want string
	}{
		{name: "Nats-Msg-Id, the first place",
			msg:  fakeNATSMsg{subject: "s.x", header: nats.Header{natsmap.NATSMsgIDHeader: {"a\x00b"}}},
			want: "invalid event id in header Nats-Msg-Id: contains a NUL byte"},
		{name: "an id header after Nats-Msg-Id",
			msg:  fakeNATSMsg{subject: "s.x", header: nats.Header{"ce_id": {"\xff"}}},
			want: "invalid event id in header ce_id (after headers Nats-Msg-Id, event_id): not valid UTF-8"},
		{name: "the configured id headers",
			msg:  fakeNATSMsg{subject: "s.x", header: nats.Header{"x-id": {"\xff"}}},
			opts: ingest.MapOptions{EventIDHeaders: []string{"x-id"}},
			want: "invalid event id in header x-id (after header Nats-Msg-Id): not valid UTF-8"},
		{name: "the JSON field after the headers",
			msg:  fakeNATSMsg{subject: "s.x", data: []byte(`{"id":[1]}`)},
			opts: ingest.MapOptions{EventIDJSONField: "id"},
			want: "invalid event id in JSON field id (after headers Nats-Msg-Id, event_id, ce_id): neither a string nor a number"},
		{name: "the subject, after the type headers",
			msg:  fakeNATSMsg{subject: long},
			want: fmt.Sprintf("invalid event type in property subject (after headers event_type, ce_type): %d bytes, longer than %d", len(long), ingest.MaxIdentifierBytes)},
		{name: "the subject, after the type headers and the JSON field",
			msg:  fakeNATSMsg{subject: long, data: []byte(`{}`)},
			opts: ingest.MapOptions{EventTypeHeaders: []string{}, EventTypeJSONField: "type"},
			want: fmt.Sprintf("invalid event type in property subject (after JSON field type): %d bytes, longer than %d", len(long), ingest.MaxIdentifierBytes)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.msg.seq = 3
			r := natsmap.MapNATS("s", tt.msg, tt.opts)
			if r.Status != ingestcore.StatusRejected || r.LastError != tt.want || r.EventID != "s/3"+fakeStoredID {
				t.Errorf("got %s %q (%s), want rejected %q", r.Status, r.LastError, r.EventID, tt.want)
			}
			// RemapNATSRejected walks the same places.
			again, ok := remapNATSRejected(r.EventID, "s", r.Key, tt.msg.data, natsmap.NATSHeaders(tt.msg.header, tt.msg.subject), tt.opts)
			if !ok || again.LastError != tt.want {
				t.Errorf("remapped: %q, ok %v", again.LastError, ok)
			}
		})
	}
}

// The server's statuses to a pull, as nats.go decodes their status lines:
// a heartbeat goes on, an expiry or a 409 of the usual kinds ends the
// pull, a refusal ends it with an error (the consumer is looked at, the
// pull retried with backoff).
func TestNATSPullStatus(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		line     string
		over, ok bool
	}{
		{"NATS/1.0 100 Idle Heartbeat", false, true},
		{"NATS/1.0 404 No Messages", true, true},
		{"NATS/1.0 408 Request Timeout", true, true},
		{"NATS/1.0 408 Interest Expired", true, true},
		{"NATS/1.0 409 Message Size Exceeds MaxBytes", true, true},
		{"NATS/1.0 409 Leadership Change", true, true},
		{"NATS/1.0 409 Server Shutdown", true, true},
		{"NATS/1.0 409 Consumer Deleted", true, false},
		{"NATS/1.0 409 Exceeded MaxRequestBatch of 10", true, false},
		{"NATS/1.0 409 Exceeded MaxWaiting", true, false},
		{"NATS/1.0 400 Bad Request", true, false},
		{"NATS/1.0 503", true, false},
	} {
		h, err := nats.DecodeHeadersMsg([]byte(tt.line + "\r\n\r\n"))
		if err != nil {
			t.Fatalf("%s: %v", tt.line, err)
		}
		over, err := natsPullStatus(&nats.Msg{Header: h})
		if over != tt.over || (err == nil) != tt.ok {
			t.Errorf("%s: over %v, error %v; want over %v, error %v", tt.line, over, err, tt.over, !tt.ok)
		}
	}
}

// proxied returns a NATS configuration of the bundle's that reaches the
// server through a proxy of the test's own.
func (b *natsBundle) proxied(t *testing.T) (Config, *netfault.Proxy) {
	t.Helper()
	proxy, err := netfault.New(strings.TrimPrefix(testkit.NATSURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	cfg := b.config()
	cfg.URL = "nats://" + proxy.Addr()
	return cfg, proxy
}

// cutOff cuts the proxy between s and the server and waits until s is not
// ready and the server has dropped the cut connection's pull request (a
// consumer's info counts only the requests someone still listens to), so
// that the server sends nothing next into the connection that was cut.
func (b *natsBundle) cutOff(t *testing.T, s *natsSource, proxy *netfault.Proxy) {
	t.Helper()
	proxy.Cut()
	waitFor(t, 20*time.Second, func() (bool, string) { return !s.Ready(), "not ready while cut off" })
	waitFor(t, 20*time.Second, func() (bool, string) {
		n := b.consumerInfo(t, DefaultConsumer).NumWaiting
		return n == 0, fmt.Sprintf("%d pull requests still waiting on the server", n)
	})
}

// shortPulls makes each pull request of s wait 1 s on the server.
func shortPulls(s *natsSource) { s.pullWait = time.Second }

// A pull request sent while the connection is cut waits in nats.go's
// buffer and goes out with the reconnection, and the server answers it at
// once with what was published meanwhile. The reconnection must not end
// that request before its answer is read: the message would wait for
// AckWait (60 s here) to come back.
func TestNATSPullSentWhileCutOff(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	cfg, proxy := b.proxied(t)
	s, _ := b.start(t, cfg, shortPulls) // a pull request expires during the cut
	b.storesFirst(t, s)
	nc := s.conn()

	b.cutOff(t, s, proxy)
	b.publish(t, natsEvent("x", "during", "t", "2"))
	waitFor(t, 20*time.Second, func() (bool, string) {
		n, err := nc.Buffered()
		return n > 0, fmt.Sprintf("a pull request sent while cut off (%d bytes buffered, %v)", n, err)
	})
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		info := b.consumerInfo(t, DefaultConsumer)
		rows := len(readRows(t, b.db))
		return rows == 2, fmt.Sprintf("%d rows, want 2 (%d pending, %d waiting for their ack, %v reconnects)",
			rows, info.NumPending, info.NumAckPending, testutil.ToFloat64(s.Metrics.Reconnects))
	})
	b.drained(t, DefaultConsumer)
}

// A delivery still on its way when the source gives up on its pull
// request (no end from the server within natsPullGrace: here every answer
// takes 3 s to come back, longer than a request's wait and grace) is
// stored all the same, not dropped with the request's inbox and left to
// AckWait (60 s here) to come back.
func TestNATSDeliveryLateForItsPull(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	cfg, proxy := b.proxied(t)
	s, _ := b.start(t, cfg, shortPulls)
	b.storesFirst(t, s)

	if err := proxy.Latency(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	b.publish(t, natsEvent("x", "late", "t", "2"))
	waitFor(t, 30*time.Second, func() (bool, string) {
		info := b.consumerInfo(t, DefaultConsumer)
		_, ok := readRows(t, b.db)[b.stream+" late"]
		return ok, fmt.Sprintf("row of the late delivery (%d pending, %d waiting for their ack)", info.NumPending, info.NumAckPending)
	})
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	b.drained(t, DefaultConsumer)
}

// A message the server sends into a connection that is dead without its
// knowing (here a black hole, then the connection closed; so is a message
// published at the very moment of a cut, before the server has noticed)
// counts for JetStream as delivered: no client can read it. It comes back
// after the consumer's AckWait, not before, and is stored once.
func TestNATSDeliveryIntoADeadConnection(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	cfg, proxy := b.proxied(t)
	cfg.AckWait = 3 * time.Second
	cfg.Pipeline.WriteTimeout = time.Second
	s, _ := b.start(t, cfg)
	b.storesFirst(t, s)

	if err := proxy.BlackHole(); err != nil {
		t.Fatal(err)
	}
	published := time.Now()
	b.publish(t, natsEvent("x", "lost", "t", "2"))
	waitFor(t, 20*time.Second, func() (bool, string) {
		info := b.consumerInfo(t, DefaultConsumer)
		return info.NumAckPending == 1, fmt.Sprintf("%d waiting for their ack, want the one sent into the black hole", info.NumAckPending)
	})
	if err := proxy.Restore(); err != nil { // closes the connection that lived through the black hole
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() (bool, string) {
		_, ok := readRows(t, b.db)[b.stream+" lost"]
		return ok, fmt.Sprintf("row of the message sent into the dead connection (%v reconnects)", testutil.ToFloat64(s.Metrics.Reconnects))
	})
	// The server's clock for AckWait starts when it sends the message,
	// which may be a little before the publication's acknowledgement.
	if took := time.Since(published); took < cfg.AckWait-500*time.Millisecond {
		t.Errorf("stored %s after its publication, before the consumer's AckWait (%s) could bring it back", took, cfg.AckWait)
	}
	b.drained(t, DefaultConsumer)
	if got := testutil.ToFloat64(s.Metrics.Duplicates); got != 0 {
		t.Errorf("duplicates = %v, want 0: the first delivery never reached the source", got)
	}
}
