// Package natsmap is the NATS JetStream source's mapping, out of the
// source's package so that the outbox's tests can map what they published
// as ingest would: a message to its row, and the remap rule of the NATS
// source's rejected rows.
package natsmap

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSKeyHeader is the NATS header whose value is a message's key (for
// ordered routes); without it the key is the subject the message was
// published on.
const NATSKeyHeader = "key"

// NATSMsgIDHeader is the header JetStream deduplicates publications on; it
// is the first place a message's event id is looked for.
const NATSMsgIDHeader = jetstream.MsgIDHeader

// NATSSubjectHeader is the header, added among a row's headers, that keeps
// the subject the message was published on (the row has no column for it).
const NATSSubjectHeader = "nats-subject"

// MapNATS maps a JetStream message of stream to its inbox row. Event id:
// header NATSMsgIDHeader (JetStream's deduplication id), else the headers
// of opts.EventIDHeaders (then the JSON field), else its position
// "<stream>/<stream sequence>@<time stored>" (see NATSPositionID). Event
// type: opts.EventTypeHeaders (then the JSON field), else the subject.
// Key: header NATSKeyHeader, else the subject. Payload: the data. Headers:
// the message's, sorted by name (a repeated header keeps its last value),
// and NATSSubjectHeader. A message that cannot be accepted becomes a
// rejected row whose event id, its position, is the same on every
// redelivery.
func MapNATS(stream string, m jetstream.Msg, opts ingest.MapOptions) ingestcore.Row {
	var seq uint64
	var stored time.Time
	if md, err := m.Metadata(); err == nil {
		seq, stored = md.Sequence.Stream, md.Timestamp
	}
	return MapParts(stream, m.Subject(), m.Headers(), m.Data(), seq, stored, MapOptionsFor(opts))
}

// MapOptionsFor is opts as the NATS mapping uses them: defaults applied,
// NATSMsgIDHeader first among the id headers.
func MapOptionsFor(opts ingest.MapOptions) ingest.MapOptions {
	opts = ingestcore.MapDefaults(opts)
	opts.EventIDHeaders = append([]string{NATSMsgIDHeader}, opts.EventIDHeaders...)
	return opts
}

// NATSPositionID is the position of a JetStream message, the event id of
// one that carries none and of a rejected message's row:
// "<stream>/<stream sequence>@<time stored>", the time the stream stored
// the message in UTC, RFC 3339 with nanoseconds. It is the same on every
// delivery of the message, on every replica of the stream. A stream
// deleted and created again under its name numbers its messages from 1
// again, but stores them later: the time keeps its messages from being
// taken for the old stream's.
//
// Not the stream's creation time: that is read from the stream's info
// when the consumer is bound, while pull requests go to the consumer by
// name, so a consumer created again on the new stream (by another replica)
// before this one notices would serve the new stream's messages under the
// old stream's creation time. The time stored comes with each message, in
// its ack subject.
func NATSPositionID(stream string, seq uint64, stored time.Time) string {
	return stream + "/" + strconv.FormatUint(seq, 10) + "@" + stored.UTC().Format(time.RFC3339Nano)
}

// MapParts is MapNATS for a message in parts: its subject, headers and data,
// its stream sequence and the time the stream stored it; opts as
// MapOptionsFor returns them.
func MapParts(stream, subject string, h nats.Header, data []byte, seq uint64, stored time.Time, opts ingest.MapOptions) ingestcore.Row {
	hs := NATSHeaders(h, subject)
	key := []byte(subject)
	if v, ok := ingestcore.LastHeader(hs[:len(hs)-1], NATSKeyHeader); ok && len(v) > 0 {
		key = v
	}
	if len(key) == 0 {
		key = nil
	}
	return NATSRow(stream, NATSPositionID(stream, seq, stored), subject, key, data, hs, opts)
}

// NATSRow maps a JetStream message, in the terms of its row, by the NATS
// rules: position is its NATSPositionID (or, for a row stored before it
// was, "<stream>/<stream sequence>"), hs its headers with
// NATSSubjectHeader, key its key (header or subject).
func NATSRow(stream, position, subject string, key, data []byte, hs []ingestcore.Header, opts ingest.MapOptions) ingestcore.Row {
	return ingestcore.MapRow(&ingestcore.Message{
		Source:          stream,
		EventIDFallback: position, EventIDFallbackProperty: "stream sequence and time stored",
		EventTypeFallback: subject, EventTypeFallbackProperty: "subject",
		Key:      key,
		Value:    data,
		Headers:  hs,
		RejectID: position,
	}, opts)
}

// Rule is the NATS source's remap rule: a rejected row that the NATS
// source stored is mapped again by the NATS rules with Opts (the headers
// as ingest stored them, NATSSubjectHeader among them).
type Rule struct{ Opts ingest.MapOptions }

// Owns reports whether s's event id is a NATSPositionID of its source, or
// "<source>/<stream sequence>" (the id that versions before it gave): ids
// only the NATS source gives a rejected row (Kafka's have a partition and
// an offset, RabbitMQ's a hash).
func (Rule) Owns(s ingestcore.Stored) bool { return IsNATSPositionID(s.Source, s.EventID) }

// Remap implements ingestcore.RemapRule.
func (r Rule) Remap(s ingestcore.Stored) ingestcore.Row {
	subject, _ := ingestcore.LastHeader(s.Headers, NATSSubjectHeader)
	return NATSRow(s.Source, s.EventID, string(subject), s.Key, s.Payload, s.Headers, MapOptionsFor(r.Opts))
}

// IsNATSPositionID reports whether id is a NATSPositionID of stream, or
// the "<stream>/<stream sequence>" of the versions before it.
func IsNATSPositionID(stream, id string) bool {
	pos, found := strings.CutPrefix(id, stream+"/")
	if !found {
		return false
	}
	seq, stored, timed := strings.Cut(pos, "@")
	if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
		return false
	}
	if !timed {
		return true
	}
	t, err := time.Parse(time.RFC3339Nano, stored)
	return err == nil && t.UTC().Format(time.RFC3339Nano) == stored
}

// NATSHeaders is what a message stores as headers: its own, sorted by
// name (a header map has no order; sorting makes it stable), each value
// of a repeated header in turn, then NATSSubjectHeader.
func NATSHeaders(h nats.Header, subject string) []ingestcore.Header {
	names := make([]string, 0, len(h))
	n := 1
	for k, vs := range h {
		names = append(names, k)
		n += len(vs)
	}
	slices.Sort(names)
	hs := make([]ingestcore.Header, 0, n)
	for _, k := range names {
		for _, v := range h[k] {
			hs = append(hs, ingestcore.Header{Key: k, Value: []byte(v)})
		}
	}
	return append(hs, ingestcore.Header{Key: NATSSubjectHeader, Value: []byte(subject)})
}
